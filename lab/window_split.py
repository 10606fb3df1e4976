"""A kernel's time split into a cost a 64 keys and a cost a program, from two ``lab/gluon_ab.py``
runs of one kind at two windows (``--window W``; lab/log.md#a33's method): a program's time is
``a + b * W / 64`` us, its programs run in ``waves = ceil(programs / SMS)``, so for each kernel and
batch both runs time

    b = (t_big - t_small) / waves / ((W_big - W_small) / 64),   a = t_small / waves - b * W_small / 64

with t the median of the run's rounds and programs = batch x KV heads x splits (the runs' own
output says each). ``--page-order shared`` in both runs makes the split the kernels' own cycles.

    python3 lab/window_split.py OUT/w4096.txt OUT/w1024.txt [--sms 132]
"""

import argparse
import math
import re
import sys

SHAPE = re.compile(r"^shape: .*Hkv (\d+),.* W (\d+),")
SPLITS = re.compile(r"^batch (\d+) splits (\d+) ")
SUMMARY = re.compile(r"^batch (\d+): (.*)$")
ENTRY = re.compile(r"(\S+) \[([0-9., ]+)\]")


def read(path: str) -> tuple[int, int, dict, dict]:
    """One run's ``(kv_heads, window, splits by batch, {(batch, kernel): median us})``."""
    hkv = window = None
    splits, times = {}, {}
    with open(path) as f:
        for line in f:
            if m := SHAPE.match(line):
                hkv, window = int(m.group(1)), int(m.group(2))
            elif m := SPLITS.match(line):
                splits[int(m.group(1))] = int(m.group(2))
            elif m := SUMMARY.match(line):
                for name, values in ENTRY.findall(m.group(2)):
                    xs = sorted(float(x) for x in values.split(","))
                    times[int(m.group(1)), name.rstrip(";")] = xs[len(xs) // 2]
    if hkv is None or not times:
        raise ValueError(f"{path}: no gluon_ab shape line or no batch summary")
    return hkv, window, splits, times


def split(big: str, small: str, sms: int = 132) -> list[tuple[int, str, float, float]]:
    """``(batch, kernel, b us a 64 keys, a us a program)`` for every batch and kernel both runs timed."""
    hkv, w_big, splits, t_big = read(big)
    hkv2, w_small, splits2, t_small = read(small)
    if hkv != hkv2 or w_big <= w_small:
        raise ValueError(f"{big} / {small}: need one kind's runs, the first at the larger window")
    out = []
    for (n, name), tb in t_big.items():
        if (n, name) not in t_small:
            continue
        if splits.get(n) != splits2.get(n):
            raise ValueError(f"batch {n}: the runs' splits differ ({splits.get(n)} / {splits2.get(n)})")
        waves = math.ceil(n * hkv * splits[n] / sms)
        b = (tb - t_small[n, name]) / waves / ((w_big - w_small) / 64)
        out.append((n, name, b, t_small[n, name] / waves - b * w_small / 64))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("big", help="gluon_ab output at the larger window")
    ap.add_argument("small", help="gluon_ab output at the smaller window")
    ap.add_argument("--sms", type=int, default=132, help="the card's SMs (H100 and H200 SXM: 132)")
    args = ap.parse_args(argv)
    try:
        rows = split(args.big, args.small, args.sms)
    except (OSError, ValueError) as e:
        print(e, file=sys.stderr)
        return 2
    for n, name, b, a in rows:
        print(f"batch {n} {name}: {b:.3f} us a 64 keys, {a:.1f} us a program")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
