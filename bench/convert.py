"""Conversion benchmark: draftsmith convert vs a naive converter vs the I/O floor.

Converts the ``full`` synthetic MiniMax DSpark checkpoint (real shapes, ~2.3 GB of MXFP8
source, ~3.9 GB of bf16 output) and prints, in one run, wall time and peak RSS of each,
every one in its own subprocess (peak RSS = its own VmHWM; ru_maxrss would carry the
parent's high-water mark across fork+exec):

- ``draftsmith``: ``Adapter.plan`` + ``execute`` (streamed, group by group);
- ``naive``: load the whole file, dequantize in a loop, ``save_file`` everything at once;
- ``io floor``: read the source bytes and write as many bytes as the output has, plain copies.

Usage: ``python bench/convert.py [workdir] [--scale tiny]`` (default: a temp dir; the synthetic
source is kept there between runs; ``--scale tiny``: synth's tiny checkpoint, a smoke run).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.plan import plan as conversion_plan

RUNNERS = {
    "draftsmith": """
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.execute import convert
a = load_adapter("minimax_dspark")
convert(a, SRC, OUT, progress=False)
""",
    "naive": """
import json, torch
from safetensors.torch import load_file, save_file
src = {}
for f in sorted(SRC.glob("*.safetensors")):
    src.update(load_file(f))
out = {}
P = "language_model.model.dspark."
for name, t in src.items():
    if name.endswith("_scale_inv"):
        continue
    new = name[len(P):].replace(".decoder_layer.", ".").replace("final_norm", "norm")
    if name + "_scale_inv" in src:
        s = src[name + "_scale_inv"].to(torch.int32)
        w = t.to(torch.float32)
        for r in range(0, w.shape[0], 1024):  # dequantize in a loop
            w[r:r + 1024] *= torch.pow(2.0, (s[r:r + 1024] - 127).float()).repeat_interleave(32, dim=1)
        t = w.to(torch.bfloat16)
    elif "hidden_norm" in new or "k_norm" in new:
        t = (1.0 + t.float()).to(torch.bfloat16)
    out[new] = t
OUT.mkdir()
save_file(out, str(OUT / "model.safetensors"))
""",
    "io floor": """
import shutil
n_out = int(sys.argv[3])
OUT.mkdir()
read = 0
for f in sorted(SRC.glob("*.safetensors")):
    with open(f, "rb") as fh:
        while chunk := fh.read(64 << 20):
            read += len(chunk)
with open(OUT / "blob", "wb") as fh:
    buf = bytes(64 << 20)
    left = n_out
    while left > 0:
        fh.write(buf[: min(left, len(buf))])
        left -= min(left, len(buf))
    fh.flush(); os.fsync(fh.fileno())
""",
}

HARNESS = """
import os, sys, time, resource
from pathlib import Path
SRC, OUT = Path(sys.argv[1]), Path(sys.argv[2])
t0 = time.perf_counter()
{body}
for f in OUT.rglob("*"):
    if f.is_file():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))  # kB, this process only
print("RESULT", time.perf_counter() - t0, hwm)
"""


def run(name: str, src: Path, out: Path, n_out: int) -> tuple[float, float]:
    shutil.rmtree(out, ignore_errors=True)
    code = HARNESS.format(body=RUNNERS[name])
    subprocess.run(["sync"], check=False)
    p = subprocess.run([sys.executable, "-c", code, str(src), str(out), str(n_out)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{name} failed:\n{p.stderr[-2000:]}")
    line = next(l for l in p.stdout.splitlines() if l.startswith("RESULT"))
    _, secs, rss_kb = line.split()
    shutil.rmtree(out, ignore_errors=True)
    return float(secs), int(rss_kb) / 2**20


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workdir", nargs="?", type=Path, default=Path(tempfile.gettempdir()) / "draftsmith-bench")
    ap.add_argument("--scale", choices=("full", "tiny"), default="full")
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"minimax_{args.scale}"
    if not (src / "config.json").exists():
        from draftsmith.framework.convert.synth import synthesize

        t = time.perf_counter()
        synthesize(load_adapter("minimax_dspark"), args.scale, src, seed=0, overwrite=True)
        print(f"synthesized the {args.scale} checkpoint in {time.perf_counter() - t:.1f} s")
    n_src = sum(f.stat().st_size for f in src.glob("*.safetensors"))
    plan = conversion_plan(load_adapter("minimax_dspark"), src)
    n_out = sum(m.nbytes for m in plan.outputs.values())
    rows = []
    for name in ("io floor", "draftsmith", "naive"):
        secs, rss = run(name, src, work / "out", n_out)
        rows.append((name, secs, rss))
    floor = rows[0][1]
    naive_rss = rows[2][2]
    print(f"\nconvert benchmark: MiniMax DSpark {args.scale} shapes, {n_src / 1e9:.2f} GB source -> {n_out / 1e9:.2f} GB output")
    print(f"machine: {platform.node()} {os.cpu_count()} cores, {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}")
    print(f"| {'converter':<10} | {'wall s':>7} | {'x floor':>7} | {'peak RSS GiB':>12} | {'RSS / naive':>11} |")
    print(f"|{'-' * 12}|{'-' * 9}|{'-' * 9}|{'-' * 14}|{'-' * 13}|")
    for name, secs, rss in rows:
        print(f"| {name:<10} | {secs:7.1f} | {secs / floor:7.2f} | {rss:12.2f} | {rss / naive_rss:11.2f} |")


if __name__ == "__main__":
    main()
