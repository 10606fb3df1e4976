"""What the benches share: the MiniMax shape, how a time is taken, and the ceilings a time is
read against.

- :data:`MINIMAX`: the MiniMax-M3.1 drafter's attention shape (:data:`TINY`: a few keys and
  heads, for the CPU runs of ``tests/docs/test_benches.py``).
- :func:`bench_graph`: median milliseconds of one CUDA-graph replay of ``fn``, the L2 flushed
  (a 256 MiB memset) before each replay, device events around the replay only (a drafter
  step runs in a graph when served, so the Python launch cost is left out); ``None`` if
  ``fn`` cannot be captured. :func:`timed` falls back to :func:`do_bench` (events, L2
  flushed by triton's ``do_bench``) for what a graph cannot hold.
- :func:`kernel_us`: device time of ``fn``'s kernels (torch.profiler), as inside a larger graph.
- :func:`copy_bandwidth`: the copy ceiling, TB/s of a device-to-device copy, bytes read plus
  written; :func:`sequence_bytes`: the bytes one sequence's block attention needs at least.

On a machine without CUDA every time is a wall-clock median of plain calls (no graph, no
flush, no profiler: :func:`kernel_us` is 0) with :data:`CPU_REPS` calls: the benches' CPU runs
check that they run, not how fast.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Shape:
    """Block attention's shape: query / KV heads, head dim, block slots ``B``, two-sided window
    ``W``, tokens a page, context tokens a sequence."""

    hq: int
    hkv: int
    d: int
    b: int
    w: int
    page: int
    ctx: int


MINIMAX = Shape(hq=64, hkv=4, d=128, b=7, w=4096, page=64, ctx=32768)
TINY = Shape(hq=4, hkv=2, d=16, b=3, w=40, page=16, ctx=100)

WARM_L2 = False  # attention.py --warm-l2: skip the flush (a diagnostic: how much of a time is cold reads)
CPU_REPS = 3  # calls a CPU time is the median of
_FLUSH = None


def device() -> torch.device:
    """The GPU if there is one, else the CPU (the Triton kernels then need TRITON_INTERPRET=1)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def on_gpu() -> bool:
    return torch.cuda.is_available()


def _wall_ms(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def do_bench(fn, rep=100, warmup=25) -> float:
    """Median milliseconds of ``fn`` (triton's ``do_bench``: events, L2 flushed before each run)."""
    if not on_gpu():
        return _wall_ms(fn, CPU_REPS)
    from triton.testing import do_bench as triton_do_bench

    return triton_do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def flush_l2():
    """Evict the L2 (a 256 MiB memset on a buffer made once); nothing with :data:`WARM_L2` or on CPU."""
    global _FLUSH
    if WARM_L2 or not on_gpu():
        return
    if _FLUSH is None:
        _FLUSH = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    _FLUSH.zero_()


def capture_graph(fn):
    """``fn`` warmed up three times on a side stream, then captured in a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def bench_graph(fn, reps=60):
    """Median milliseconds of one replay of ``fn`` captured in a CUDA graph, L2 flushed before
    each replay, device events around the replay only; ``None`` if ``fn`` cannot be captured."""
    if not on_gpu():
        return _wall_ms(fn, CPU_REPS)
    flush_l2()
    try:
        graph = capture_graph(fn)
    except Exception:  # noqa: BLE001
        torch.cuda.synchronize()
        return None
    graph.replay()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        flush_l2()
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    return times[len(times) // 2]


def kernel_us(fn, calls=20, per_kernel=False):
    """Mean device microseconds per call of ``fn``'s kernels (torch.profiler / CUPTI), L2
    flushed before each call, the flush's own kernels left out: the time the kernels occupy
    the GPU, without the replay's launch cost that :func:`bench_graph` includes. 0 (``{}``) on CPU."""
    if not on_gpu():
        return {} if per_kernel else 0.0
    from torch.profiler import ProfilerActivity, profile

    def device_us(work):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            work()
            torch.cuda.synchronize()
        return {e.key: getattr(e, "device_time_total", 0) for e in prof.key_averages()}

    fn()
    torch.cuda.synchronize()
    flush_names = set(device_us(flush_l2))

    def calls_with_flush():
        for _ in range(calls):
            flush_l2()
            fn()

    times = {k: t / calls for k, t in device_us(calls_with_flush).items() if k not in flush_names and t > 0}
    return times if per_kernel else sum(times.values())


def timed(fn, rep=100, warmup=25):
    """(milliseconds, how): a graph replay if capturable, else :func:`do_bench`."""
    ms = bench_graph(fn)
    if ms is not None:
        return ms, "graph" if on_gpu() else "wall clock (CPU)"
    return do_bench(fn, rep=rep, warmup=warmup), "do_bench"


def copy_bandwidth(nbytes: int = 2 << 30) -> float:
    """TB/s of a device-to-device copy of ``nbytes`` (2 GiB; 16 MiB on CPU), bytes read + written."""
    n = nbytes // 2 if on_gpu() else 8 << 20
    x = torch.randn(n, dtype=torch.bfloat16, device=device())
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x))
    return 2 * x.numel() * 2 / (ms * 1e-3) / 1e12


def sequence_bytes(w: int, b: int, hq: int, hkv: int, d: int) -> int:
    """Bytes one sequence's block attention needs at least (bf16): the ``W - 1 + B`` keys its
    window and block reach, K and V for every KV head, plus q and out."""
    return (w - 1 + b) * hkv * d * 2 * 2 + 2 * b * hq * d * 2
