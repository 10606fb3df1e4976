"""Benchmark of the split-KV merge (``merge_splits``) at the MiniMax drafter's split shapes.

Each case is the partials one attention call leaves: ``N`` sequences x B 7 x Hq 64 rows,
``S`` splits, D 128 float32 (``po``) and log2-sum-exps (``plse``). Rows: the Triton merge at
its default (``merge_config``) and at each rows-per-program / warps variant; the baseline is
the same merge in torch (``logsumexp`` weights, a weighted sum); the floor is the merge's
bytes (partials read, bf16 output written) at the copy bandwidth of the same run. Times:
CUDA-graph replays with L2 flushed (``bench/attention.py``'s ``bench_graph``), median.

Usage: ``python3 lab/split_merge.py``.
"""

import argparse
import itertools

import torch

import _paths  # noqa: F401  (bench/ on sys.path)
from attention import bench_graph, copy_bandwidth
from draftsmith.lowering.split_merge import merge_config, merge_splits

B, HQ, D = 7, 64, 128
LN2 = 0.6931471805599453


def torch_merge(po, plse, out):
    """The baseline: the same merge with torch ops (weights from the log2 LSEs)."""
    w = torch.softmax(plse * LN2, dim=-1)
    out.copy_((po * w[..., None]).sum(-2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="1x15,1x31,4x8,16x2", help="comma list of N x S")
    args = ap.parse_args()
    copy_tbs = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()}; copy {copy_tbs:.2f} TB/s (read+write)")
    print("| N x S | bytes MB | floor us | torch us | merge (default rows/warps) us | best variant |")
    print("|---|---:|---:|---:|---:|---|")
    for case in args.cases.split(","):
        n, s = (int(x) for x in case.split("x"))
        po = torch.randn(n, B, HQ, s, D, device="cuda")
        plse = torch.randn(n, B, HQ, s, device="cuda") * 4
        plse[..., 0] = float("-inf")  # a split that saw no key
        out = torch.empty(n, B, HQ, D, dtype=torch.bfloat16, device="cuda")
        ref = torch.empty_like(out)
        torch_merge(po, plse, ref)
        nbytes = po.numel() * 4 + plse.numel() * 4 + out.numel() * 2
        floor_us = nbytes / (copy_tbs * 1e12 / 2) * 1e6  # copy TB/s counts read + write
        torch_us = bench_graph(lambda: torch_merge(po, plse, ref)) * 1e3
        rows, warps = merge_config(n * B * HQ, s, po.device)
        timings = {}
        for r, w in itertools.product((1, 2, 4, 8, 16), (1, 2, 4, 8)):
            out.fill_(float("nan"))
            merge_splits(po, plse, out, rows=r, num_warps=w)
            err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            if not err < 1e-2:
                raise SystemExit(f"merge rows={r} warps={w}: error {err:.3g}")
            timings[(r, w)] = bench_graph(lambda: merge_splits(po, plse, out, rows=r, num_warps=w)) * 1e3
        best = min(timings, key=timings.get)
        print(f"| {n} x {s} | {nbytes / 1e6:.1f} | {floor_us:.1f} | {torch_us:.1f} | {timings[(rows, warps)]:.1f} "
              f"({rows}/{warps}) | {timings[best]:.1f} ({best[0]}/{best[1]}) |")
        print("#", {f"{r}/{w}": round(t, 1) for (r, w), t in timings.items()})


if __name__ == "__main__":
    main()
