"""A/B of the Gluon kernel's build options at the MiniMax shape, or a drafter kind's (``--kind``) (one
CUDA GPU, SM90, triton 3.6).

Times ``gluon_window_block.launch`` under each build named by ``--builds`` (``base``, or
``+``-joined build options of ``launch``: ``overlap``, ``pingpong``; ``base`` turns every option
off, where ``launch``'s defaults turn some on), and the kernel as it was at each git revision
of ``--against`` (with that revision's defaults; an entry ending in ``.py`` that names a file
is that file's kernel instead: the device machine's copy has no ``.git``), alternating, at
the default split count (and ``--num-buf`` ring slots, if given), each output checked against the float64 oracle of
``bench/attention.py``. ``--page``, ``--layout``, ``--head-dim`` and ``--kind`` (a drafter kind's
heads, KV heads, head dim, block, window or full attention, context: ``attention.KINDS``) are
``attention.py``'s. ``--num-bufs 4,5``: every kernel run once per ring-slot count (named
``<run>@nb<slots>``). ``--fa4``: FlashAttention-4 on the same K/V (``attention.make_fa4``), in the
same alternation, and each run's FA4 / run ratio in the summary.
Same timing method as that bench (CUDA-graph replay, L2 flushed, median). Prints one line per
measurement and a summary per batch.
"""

import argparse
import atexit
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _paths  # noqa: F401  (bench/ on sys.path)
import attention as A
from draftsmith.lowering import gluon_window_block as g
from draftsmith.lowering.base import MaskSpec
from draftsmith.lowering.triton_window_block import choose_config

OPTIONS = ("overlap", "pingpong")


def refuse(line: str):
    """A bad argument: one line on stderr, exit 2."""
    print(line, file=sys.stderr)
    raise SystemExit(2)


def build_kwargs(name: str) -> dict:
    """``base`` -> every option off; ``overlap`` -> that one on, the rest off."""
    on = set() if name == "base" else set(name.split("+"))
    unknown = on - set(OPTIONS)
    if unknown:
        refuse(f"--builds: unknown option(s) {sorted(unknown)}; known: {OPTIONS}")
    return {o: o in on for o in OPTIONS}


ROOT = Path(__file__).resolve().parents[1]
KERNEL = "lowering/gluon_window_block.py"


def kernel_at(rev: str):
    """The Gluon kernel module as it was at git revision ``rev``, imported beside today's as
    ``draftsmith.lowering.gluon_window_block_at_<rev>`` (its relative imports resolve to today's
    sibling modules: the kernel is what is compared); ``rev`` naming a ``.py`` file: that file's
    kernel. One line and exit 2 if git has no such file."""
    from_file = rev.endswith(".py") and Path(rev).is_file()  # the device machine's copy has no .git
    if from_file:
        text = Path(rev).read_text()
    else:
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{KERNEL}"], capture_output=True, text=True)
        if shown.returncode != 0:
            why = (shown.stderr.strip().splitlines() or ["git failed"])[-1]
            refuse(f"--against {rev}: git has no {KERNEL} there ({why})")
        text = shown.stdout
    tag = re.sub(r"\W", "_", Path(rev).stem if from_file else rev)
    folder = tempfile.mkdtemp(prefix="gluon_ab_")  # ours alone; removed at exit
    atexit.register(shutil.rmtree, folder, True)
    path = Path(folder) / f"gluon_window_block_at_{tag}.py"
    path.write_text(text)  # kept until exit: triton reads a kernel's source from its file
    name = f"draftsmith.lowering.gluon_window_block_at_{tag}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def use_kind(kind: str) -> int:
    """Set ``attention``'s shape globals to drafter kind ``kind`` (``attention.KINDS``), as its
    ``--kind`` does; returns the kind's context length."""
    if kind not in A.KINDS:
        refuse(f"--kind {kind}: unknown; known: {', '.join(sorted(A.KINDS))}")
    hq, hkv, d, b, w, ctx, _ = A.KINDS[kind]
    A.HQ, A.HKV, A.D, A.B, A.FULL = hq, hkv, d, b, w is None
    A.W = ctx + b if w is None else w  # full attention: a window that reaches every key (attention.py's rule)
    return ctx


def inputs(n: int, ctx: int, layout: str, order: str):
    """``attention.py``'s inputs at batch ``n`` of the shape its globals hold, with their float64
    oracle's view and the launch's config (``choose_config``, the Gluon kernel allowed):
    ``((q, cache, k_blk, v_blk), dense, config)``."""
    q, cache, kb, vb = A.make_inputs(n, ctx, seed=n, layout=layout, order=order)
    return (q, cache, kb, vb), A.Dense(q, cache, kb, vb, ctx), launch_config(n, cache, q.device)


def launch_config(n: int, cache, device):
    """The lowering's config (``choose_config``, the Gluon kernel allowed) at batch ``n`` on
    ``cache``, for the shape ``attention``'s globals hold."""
    ring = cache.block_table.shape[1] * cache.page_size
    span = ring if A.FULL else min(A.W - 1, ring)  # triton_window_block's max_span
    return choose_config(n, A.B, A.HQ, A.HKV, A.D, span, device, gluon_ok=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--builds", default="base,pingpong,overlap+pingpong")
    ap.add_argument("--page-order", choices=A.PAGE_ORDERS, default="random",
                    help="attention.py's --page-order (shared: every sequence's context in the same pages, K/V in L2)")
    ap.add_argument("--page", type=int, default=A.PAGE, help="tokens a page (TensorRT-LLM's default: 32)")
    ap.add_argument("--layout", choices=("nhd", "hnd", "trtllm"), default="nhd", help="page storage (attention.py's)")
    ap.add_argument("--head-dim", type=int, default=A.D, help="head dim (attention.py's --head-dim)")
    ap.add_argument("--num-buf", type=int, default=None, help="ring slots for every build (default: the kernel's)")
    ap.add_argument("--num-bufs", default="", help="comma list of ring-slot counts: every run once per count")
    ap.add_argument("--against", default="", help="comma list of git revisions, or kernel .py files, whose kernel to time beside")
    ap.add_argument("--kind", default=None, help="a drafter kind's shape (attention.KINDS); sets --ctx and --head-dim")
    ap.add_argument("--fa4", action="store_true", help="time FlashAttention-4 beside (attention.make_fa4), if importable")
    ap.add_argument("--window", type=int, default=None,
                    help="the two-sided window W instead of the kind's (a windowed kind): times at two windows split "
                         "a kernel's time a program into a fixed part and a part a key")
    args = ap.parse_args()
    A.PAGE, A.D, A.PAGE_ORDER = args.page, args.head_dim, args.page_order
    if args.kind:
        args.ctx = use_kind(args.kind)
    if args.window is not None:
        if A.FULL or not 1 < args.window <= args.ctx:
            refuse(f"--window {args.window}: needs a windowed shape and 1 < W <= the context ({args.ctx})")
        A.W = args.window
    slot_counts = [int(x) for x in args.num_bufs.split(",") if x] or [args.num_buf]
    builds = args.builds.split(",") if args.builds else []
    for name in builds:
        build_kwargs(name)  # unknown options refused before any GPU work
    older = {rev: kernel_at(rev) for rev in args.against.split(",") if rev}
    if args.fa4 and A.fa4_varlen_func is None:
        print(f"--fa4: FlashAttention-4 is not importable here ({A.FA4_MISSING}); timed without it", flush=True)
    mask = MaskSpec(causal=False, window=None if A.FULL else A.W)
    scale = A.D ** -0.5
    print(f"shape: {args.kind or 'MiniMax'} Hq {A.HQ}, Hkv {A.HKV}, D {A.D}, B {A.B}, "
          f"{'full attention' if A.FULL else f'W {A.W}'}, ctx {args.ctx}, {args.layout} pages of {A.PAGE}", flush=True)
    for n in [int(x) for x in args.batches.split(",")]:
        (q, cache, kb, vb), dense, cfg = inputs(n, args.ctx, args.layout, args.page_order)
        res = {}
        kernels = {name: (g, build_kwargs(name)) for name in builds}
        kernels.update({rev: (module, {}) for rev, module in older.items()})
        runs = {(name if len(slot_counts) == 1 else f"{name}@nb{nb}"): (module, kw, nb)
                for name, (module, kw) in kernels.items() for nb in slot_counts}
        if args.fa4 and A.fa4_varlen_func is not None:
            runs["FA4"] = (None, A.make_fa4(dense, q), None)
        for _ in range(args.rounds):
            for name, (module, kw, nb) in runs.items():

                def fn(module=module, kw=kw, nb=nb):
                    if module is None:  # FA4: kw is its call
                        return kw()
                    return module.launch(q, cache, kb, vb, mask, scale, num_splits=cfg.num_splits, num_buf=nb, **kw)
                out = fn()
                err = A.oracle_error(out, dense)
                us = A.bench_graph(fn) * 1e3
                res.setdefault(name, []).append(us)
                print(f"batch {n} splits {cfg.num_splits} {name}: {us:.1f} us, "
                      f"{A.needed_bytes(n) / (us * 1e-6) / 1e12:.2f} TB/s, oracle err {err:.2e}"
                      + ("" if err < 1e-2 else "  WRONG (bf16 lands near 2e-3)"), flush=True)
        print(f"batch {n}: " + "; ".join(f"{k} {[round(x, 1) for x in v]}" for k, v in res.items()), flush=True)
        if "FA4" in res:  # FA4 / run, medians over the rounds: above 1 = the run is faster
            fa4 = sorted(res["FA4"])[len(res["FA4"]) // 2]
            print(f"batch {n} FA4 / run: " + "; ".join(f"{k} {fa4 / sorted(v)[len(v) // 2]:.3f}"
                                                         for k, v in res.items() if k != "FA4"), flush=True)


if __name__ == "__main__":
    main()
