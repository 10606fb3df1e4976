"""A/B of the Gluon kernel's build options at the MiniMax shape (one CUDA GPU, SM90, triton 3.6).

Times ``gluon_window_block.launch`` under each build named by ``--builds`` (``base``, or
``+``-joined build options of ``launch``: ``overlap``, ``pingpong``; ``base`` turns every option
off, where ``launch``'s defaults turn some on), alternating, at the
default split count, each output checked against the float64 oracle of ``bench/attention.py``.
Same timing method as that bench (CUDA-graph replay, L2 flushed, median). Prints one line per
measurement and a summary per batch.
"""

import argparse

import attention as A
from draftsmith.lowering import gluon_window_block as g
from draftsmith.lowering.base import MaskSpec
from draftsmith.lowering.triton_window_block import choose_config

OPTIONS = ("overlap", "pingpong")


def build_kwargs(name: str) -> dict:
    """``base`` -> every option off; ``overlap`` -> that one on, the rest off."""
    on = set() if name == "base" else set(name.split("+"))
    unknown = on - set(OPTIONS)
    if unknown:
        raise SystemExit(f"--builds: unknown option(s) {sorted(unknown)}; known: {OPTIONS}")
    return {o: o in on for o in OPTIONS}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--builds", default="base,pingpong,overlap+pingpong")
    ap.add_argument("--page-order", choices=("random", "sequential"), default="random")
    args = ap.parse_args()
    builds = args.builds.split(",")
    mask = MaskSpec(causal=False, window=A.W)
    scale = A.D ** -0.5
    for n in [int(x) for x in args.batches.split(",")]:
        q, cache, kb, vb = A.make_inputs(n, args.ctx, seed=n, order=args.page_order)
        dense = A.Dense(q, cache, kb, vb, args.ctx)
        cfg = choose_config(n, A.B, A.HQ, A.HKV, A.D, A.W - 1, q.device, gluon_ok=True)
        res = {}
        for _ in range(args.rounds):
            for name in builds:
                kw = build_kwargs(name)

                def fn(kw=kw):
                    return g.launch(q, cache, kb, vb, mask, scale, num_splits=cfg.num_splits, **kw)
                out = fn()
                err = A.oracle_error(out, dense)
                us = A.bench_graph(fn) * 1e3
                res.setdefault(name, []).append(us)
                print(f"batch {n} splits {cfg.num_splits} {name}: {us:.1f} us, "
                      f"{A.needed_bytes(n) / (us * 1e-6) / 1e12:.2f} TB/s, oracle err {err:.2e}", flush=True)
        print(f"batch {n}: " + "; ".join(f"{k} {[round(x, 1) for x in v]}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
