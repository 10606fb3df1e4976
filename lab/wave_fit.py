"""Streaming rate and fixed cost a wave, per kernel, from ``bench/attention.py`` logs (no GPU).

Run ``attention.py --window W --batches 33,66,132 --log wW.jsonl`` for two or more windows
``W``, then ``python3 lab/wave_fit.py w2048.jsonl w4096.jsonl ...``. At ``n * Hkv`` programs
a multiple of the SM count every wave is whole (one program an SM; H200: 132 SMs, 4 KV heads,
so batches 33, 66, 132). Per kernel and window, the slope of time over waves (least squares,
so a first wave's extra start-up drops out) is the cost of one wave; over the windows, that
cost against one wave's bytes (``SMs x`` a program's K/V window ``(W-1+B) x D x 2 x 2`` and its
``B x G`` rows of q and out) is a line: its slope gives the streaming rate (TB/s), its
intercept the cost a wave pays whatever the window (microseconds): program start, tail,
epilogue and the gap to the next program, as far as they leave memory idle. The last column
is the largest distance between a measured time and the fitted model (a first-wave extra a
window plus waves x (fixed + bytes / rate)): with two windows the line passes through both
per-wave costs, so only the spread over waves shows there.
Units: microseconds, TB/s (1e12 bytes a second). Uses the replay times (``"us"``), not the
profiler's kernel times.
"""

import argparse
import json
import sys
from pathlib import Path

import _paths  # noqa: F401  (bench/ on sys.path)
from timing import sequence_bytes


def refuse(line: str):
    """Bad input: one line on stderr, exit 2."""
    print(line, file=sys.stderr)
    raise SystemExit(2)


def line_fit(xs, ys):
    """Least-squares ``y = a + b x``: ``(a, b)``; needs two distinct ``x``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def read_log(path: Path, sms_arg):
    """``(shape, sms, {method: {batch: us}})`` of one attention.py log."""
    shape, sms, times = None, sms_arg, {}
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        refuse(f"{path}: cannot read ({e.strerror})")
    for i, raw in enumerate(lines, 1):
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError:
            refuse(f"{path}:{i}: not a JSON line")
        if "shape" in rec:
            shape = rec["shape"]
            sms = sms_arg or rec.get("sms")
        elif "us" in rec and "batch" in rec and "method" in rec:
            times.setdefault(rec["method"], {})[int(rec["batch"])] = float(rec["us"])
    if shape is None:
        refuse(f"{path}: no header record with 'shape' (is it an attention.py --log?)")
    if not sms:
        refuse(f"{path}: the log does not name the SM count; pass --sms")
    return shape, int(sms), times


def wave_bytes(shape, sms: int) -> float:
    """Bytes one wave of ``sms`` programs (one a (sequence, KV head)) reads and writes."""
    return sms / shape["Hkv"] * sequence_bytes(shape["W"], shape["B"], shape["Hq"], shape["Hkv"], shape["D"])


def fit(logs, sms_arg=None):
    """``{method: {"per_wave": {W: us}, "TBps": rate, "fixed_us": us a wave, "worst_miss_us": us}}``
    over the logs, one window each (a window given twice is refused)."""
    per_wave, bytes_at, points = {}, {}, {}
    for path in logs:
        shape, sms, times = read_log(Path(path), sms_arg)
        w = shape["W"]
        if w in bytes_at:
            refuse(f"{path}: window {w} is already in another log (one log a window)")
        bytes_at[w] = wave_bytes(shape, sms)
        for method, at in times.items():
            whole = {n * shape["Hkv"] // sms: us for n, us in at.items() if n * shape["Hkv"] % sms == 0}
            if len(whole) < 2:
                refuse(f"{path}: {method}: needs two batches of whole waves (n * {shape['Hkv']} a multiple of {sms})")
            first, per_wave.setdefault(method, {})[w] = line_fit(list(whole), list(whole.values()))
            points.setdefault(method, []).extend((w, first, waves, us) for waves, us in whole.items())
    out = {}
    for method, by_w in per_wave.items():
        if len(by_w) < 2:
            continue  # a kernel timed at one window only: no line
        ws = sorted(by_w)
        fixed, us_per_byte = line_fit([bytes_at[w] for w in ws], [by_w[w] for w in ws])
        # How well "a first-wave extra a window + waves x (fixed + bytes / rate)" reproduces every
        # measured time: the largest miss, in us.
        worst = max(abs(us - (first + waves * (fixed + us_per_byte * bytes_at[w])))
                    for w, first, waves, us in points[method] if w in by_w)
        out[method] = {"per_wave": {w: by_w[w] for w in ws}, "TBps": 1.0 / (us_per_byte * 1e6) if us_per_byte > 0
                       else float("inf"), "fixed_us": fixed, "worst_miss_us": worst}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", help="attention.py --log files, one window each")
    ap.add_argument("--sms", type=int, default=None, help="SM count (read from the logs where they name it)")
    args = ap.parse_args()
    res = fit(args.logs, args.sms)
    if not res:
        refuse("no kernel was timed at two windows")
    ws = sorted({w for r in res.values() for w in r["per_wave"]})
    print("| kernel | " + " | ".join(f"a wave at W {w} (us)" for w in ws)
          + " | stream (TB/s) | fixed a wave (us) | worst miss of the model (us) |")
    print("|---|" + "---|" * (len(ws) + 3))
    for method, r in res.items():
        cells = [f"{r['per_wave'][w]:.1f}" if w in r["per_wave"] else "-" for w in ws]
        print(f"| {method} | " + " | ".join(cells) + f" | {r['TBps']:.2f} | {r['fixed_us']:.1f} | {r['worst_miss_us']:.1f} |")


if __name__ == "__main__":
    main()
