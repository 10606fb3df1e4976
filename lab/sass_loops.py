"""The Gluon kernel's loops that hold MMAs, as SASS for sm_90a, compiled without a GPU: each
loop's instruction count a warp an iteration (one ring tile in the consumers' ring loops) and its
opcode mix, and the kernel's instructions outside those loops (lab/log.md#a35, #a36). Needs triton 3.6 (Gluon's Hopper API; its package's ``cuobjdump``). ``--variant``: a
``lab/variants`` patch (after its ``On top of:`` chain) instead of today's kernel.

    PYTHONPATH=.:lab:lab/tests python3 lab/sass_loops.py --consumers 2 --overlap

What it tells: instructions a tile are what bound the consumers where memory does not (lab/log.md#a32:
the two-consumer build at the H200's power-capped clock), and a count changes with a variant before
any GPU run.
"""

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

INSTR = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\s+(?:`\()?0x([0-9a-f]+)")
GUARD = re.compile(r"^@!?U?P\w+\s+")


def opcode(instruction: str) -> str:
    """An instruction's mnemonic without its guard or modifiers (``@!P0 FMNMX.FTZ R3, ...`` -> ``FMNMX``)."""
    return GUARD.sub("", instruction).split()[0].split(".")[0]


def loops(sass: str, min_mma: int = 2) -> list:
    """The innermost loops of ``sass`` (cuobjdump text: a backward branch and the instructions from
    its target to it) whose body holds at least ``min_mma`` HGMMA instructions: ``(start address,
    end address, opcode counts)`` per loop, in order; an opcode is the mnemonic without its
    modifiers or guard."""
    ins = [(int(m.group(1), 16), m.group(2)) for m in map(INSTR.match, sass.splitlines()) if m]
    at = {a: i for i, (a, _) in enumerate(ins)}
    found = []
    for i, (a, text) in enumerate(ins):
        m = BRANCH.search(text)
        if not m or int(m.group(1), 16) > a or int(m.group(1), 16) not in at:
            continue
        body = [t for _, t in ins[at[int(m.group(1), 16)]:i + 1]]
        ops = collections.Counter(opcode(t) for t in body)
        if ops["HGMMA"] >= min_mma:
            found.append((int(m.group(1), 16), a, ops))
    return [f for f in found if not any(g is not f and f[0] <= g[0] and g[1] <= f[1] for g in found)]


def outside(sass: str, found: list) -> tuple[int, int]:
    """``(instructions of sass, those outside every loop of found)`` (``found``: :func:`loops`'s)."""
    addrs = [int(m.group(1), 16) for m in map(INSTR.match, sass.splitlines()) if m]
    return len(addrs), sum(1 for a in addrs if not any(s <= a <= e for s, e, _ in found))


def sass_of(cubin: bytes) -> str:
    """``cubin``'s SASS, by the ``cuobjdump`` that triton's NVIDIA backend carries."""
    import triton.backends.nvidia as nv

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([str(Path(nv.__file__).parent / "bin" / "cuobjdump"), "-sass", f.name],
                              capture_output=True, text=True, check=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--consumers", type=int, choices=(1, 2), default=2)
    ap.add_argument("--overlap", action="store_true", help="the intra-warpgroup overlap build (one split)")
    ap.add_argument("--splits", type=int, default=1)
    ap.add_argument("--page", type=int, default=32)
    ap.add_argument("--variant", default="", help="a lab/variants/X.patch applied to today's kernel")
    ap.add_argument("--wide", action="store_true", help="the wide build (needs --variant lab/variants/wide-ring.patch)")
    ap.add_argument("--switch", action="append", default=[],
                    help="a variant's module-level switch set True (e.g. WIDE_KV, WIDE_Q_SMEM); repeat for more")
    ap.add_argument("--top", type=int, default=16, help="opcodes shown a loop")
    ap.add_argument("--dump", type=int, default=-1, metavar="N", help="also print loop N's instructions (0: the first)")
    args = ap.parse_args()
    import gluon_compile

    kernel = gluon_compile.gwb
    if args.variant:
        from kernel_tests import variant_module
        kernel = variant_module(Path(args.variant), args.switch)
    built = gluon_compile.compile_for_sm90(consumers=args.consumers, overlap=args.overlap, page=args.page,
                                           num_splits=args.splits, kernel=kernel, **({"wide": True} if args.wide else {}))
    if built is None:
        print("needs Gluon's Hopper API (triton 3.6)", file=sys.stderr)
        raise SystemExit(2)
    sass = sass_of(built["cubin"])
    found = loops(sass)
    total, rest = outside(sass, found)
    print(f"{total} instructions, {rest} outside the loops below (a program's once-run code and the loops without MMAs)")
    for n, (start, end, ops) in enumerate(found):
        if n == args.dump:
            for m in map(INSTR.match, sass.splitlines()):
                if m and start <= int(m.group(1), 16) <= end:
                    print(f"  {m.group(1)}  {m.group(2)}")
        mix = ", ".join(f"{k} {v}" for k, v in ops.most_common(args.top))
        print(f"loop {start:#x}-{end:#x}: {sum(ops.values())} instructions an iteration, {ops['HGMMA']} HGMMA; {mix}")


if __name__ == "__main__":
    main()
