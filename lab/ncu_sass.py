"""Where a kernel's loop spends its warps' time, from Nsight Compute's source page (``ncu -i REP --page
source --csv --print-source sass``, as ``lab/gpu_session.sh ncu-source`` writes it): the hottest loop's
instructions (those executed most often; ``--copy N``: the first N of them, one consumer's copy of a
loop that two consumers run as two copies) with their warp-state samples, and the loop cut into
phases at its wgmma landmarks (each ``WARPGROUP.ARRIVE`` before an HGMMA group, the scores' and
P @ V's ``WARPGROUP.DEPBAR``, the first ``MUFU``). Samples are a warp's time: with ``--cycles C`` (the
loop step's cycles, e.g. from ``lab/gluon_ab.py --window``'s cost a tile) each phase is given in
cycles, else as a share of the loop.

    python3 lab/ncu_sass.py OUT/source_ours_dflash2_minimax_64_sass.csv.xz --copy 293 --cycles 1430 --top 20
"""

import argparse
import csv
import lzma
import sys
from collections import Counter

ALL = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read(path: str) -> tuple[list[str], list[dict]]:
    """The source page's columns and rows (the CSV's first line names the kernel; the second is the
    header); ``path`` ending in ``.xz`` is read as ``gpu_session.sh ncu-source`` writes it, compressed."""
    with (lzma.open if str(path).endswith(".xz") else open)(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    start = next(i for i, r in enumerate(rows) if ALL in r and "Source" in r)
    header = rows[start]
    return header, [dict(zip(header, r)) for r in rows[start + 1:] if len(r) == len(header)]


def hot_loop(rows: list[dict], copy: int = 0) -> list[dict]:
    """The instructions executed the most often, at least 8 of them (a loop body: every instruction
    of it runs once a step), in address order; ``copy``: only the first ``copy`` of them."""
    counts = Counter(int(r[EXECUTED]) for r in rows if int(r[EXECUTED]) > 0)
    top = max((n for n, k in counts.items() if k >= 8), default=0)
    body = [r for r in rows if int(r[EXECUTED]) == top]
    return body[:copy] if copy else body


def phases(body: list[dict]) -> list[tuple[str, int, int]]:
    """The loop cut at its landmarks: ``(name, first, end)`` index ranges covering the whole body."""
    text = [r["Source"].strip() for r in body]
    marks = [0]
    names = ["top: waits for the tile, turn"]
    arrives = [i for i, t in enumerate(text) if t.startswith("WARPGROUP.ARRIVE")]
    for n, i in enumerate(arrives[:2]):
        marks.append(i)
        names.append(("issue: first HGMMA group", "issue: second HGMMA group")[n])
    for level, name in (("0x1", "wait: scores (DEPBAR.LE 1)"), ("0x0", "wait: P @ V (DEPBAR.LE 0)")):
        at = [i for i, t in enumerate(text) if t.startswith("WARPGROUP.DEPBAR") and t.endswith(level)]
        if at and at[0] > marks[-1]:
            marks += [at[0], at[0] + 1]
            names += [name, "softmax" if level == "0x1" else "after the P @ V wait"]
    mufu = [i for i, t in enumerate(text) if "MUFU" in t and i > marks[-1]]
    if mufu:
        marks.append(mufu[0])
        names.append("exp2s to the end")
    order = sorted(zip(marks, names))
    return [(nm, i, j) for (i, nm), (j, _) in zip(order, order[1:] + [(len(body), "")]) if j > i]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--copy", type=int, default=0, help="only the loop's first N instructions (one copy)")
    ap.add_argument("--cycles", type=float, default=0.0, help="the loop step's cycles: phases in cycles")
    ap.add_argument("--top", type=int, default=12, help="the instructions with the most samples shown")
    ap.add_argument("--outside", action="store_true",
                    help="also the samples outside the loop, by execution count (a program's fixed part: the "
                         "instructions every program's warps run once), and their hottest instructions")
    args = ap.parse_args(argv)
    header, rows = read(args.csv)
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    body = hot_loop(rows, args.copy)
    total = sum(int(r[ALL]) for r in body)
    if not body or total == 0:
        print(f"{args.csv}: no sampled loop", file=sys.stderr)
        return 2
    unit = (lambda s: f"{s * args.cycles / total:6.0f} cycles") if args.cycles else (lambda s: f"{s / total:6.1%}")
    print(f"loop: {len(body)} instructions, executed {body[0][EXECUTED]} times each, {total} samples")
    for name, i, j in phases(body):
        print(f"  {name:32s} {j - i:4d} instr  {unit(sum(int(r[ALL]) for r in body[i:j]))}")
    print("hottest instructions (samples, top reasons):")
    for k, r in sorted(enumerate(body), key=lambda kr: -int(kr[1][ALL]))[:args.top]:
        why = [(int(r[h] or 0), h[6:]) for h in reasons if int(r[h] or 0)]
        other = int(r[ALL]) - sum(n for n, _ in why)  # reasons the page has no column for (the wgmma queue's)
        why = sorted(why + ([(other, "other")] if other > 0 else []), reverse=True)[:3]
        print(f"  {k:4d} {int(r[ALL]):6d}  {r['Source'].strip()[:56]:56s} " + " ".join(f"{w}:{n}" for n, w in why))
    if args.outside:
        print_outside(rows, body, args.top)
    return 0


def print_outside(rows: list[dict], body: list[dict], top: int) -> None:
    """The samples of the instructions outside the hot loop, grouped by how often each ran (largest
    groups first), and the ``top`` hottest of them."""
    loop_count = int(body[0][EXECUTED])
    rest = [(i, r) for i, r in enumerate(rows) if int(r[EXECUTED]) != loop_count]
    total = sum(int(r[ALL]) for r in rows)
    groups = Counter()
    sizes = Counter()
    for _, r in rest:
        groups[int(r[EXECUTED])] += int(r[ALL])
        sizes[int(r[EXECUTED])] += 1
    print(f"outside the loop: {sum(groups.values())} of {total} samples")
    for count, samples in groups.most_common(8):
        print(f"  executed {count:9d} times: {sizes[count]:5d} instructions, {samples / total:6.1%} of the samples")
    for i, r in sorted(rest, key=lambda ir: -int(ir[1][ALL]))[:top]:
        print(f"  {i:5d} {int(r[ALL]):6d}  x{int(r[EXECUTED]):<8d} {r['Source'].strip()[:60]}")


if __name__ == "__main__":
    raise SystemExit(main())
