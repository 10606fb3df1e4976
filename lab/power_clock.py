"""Sustained load: each kernel (today's Gluon kernel, kernel files of ``--against``, FA4 with ``--fa4``)
at a drafter kind's shape (``--kind``, ``attention.KINDS``) replayed back to back for ``--seconds``,
while NVML is read every few milliseconds: SM clock (MHz), power (W), the energy counter (J) and the
clock-event reasons (power cap, thermal). One CUDA GPU; needs ``pynvml`` (nvidia-ml-py).

Prints, per run and batch: us a call under that load (no L2 flush: the graph replays back to back),
median / p10 SM clock while it ran, average power from the energy counter, joules a call, and the
share of samples with the software power cap active. What it tells: whether a kernel is slowed
by the clock the power cap sets (the phase timer's cycles over ns read 1.42 GHz at two consumers,
1.79 at one, on the H200: lab/log.md#a31), and how much energy each kernel spends on the same work.
"""

import argparse
import threading
import time

import _paths  # noqa: F401  (bench/ on sys.path)
import attention as A
import torch
from gluon_ab import inputs, kernel_at, refuse, use_kind

from draftsmith.lowering import gluon_window_block as g
from draftsmith.lowering.base import MaskSpec

POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap


class Sampler(threading.Thread):
    """NVML (``nvml``: the pynvml module) read every ``period`` seconds until :meth:`stop`:
    rows of (SM clock MHz, power W, power-capped)."""

    def __init__(self, nvml, handle, period: float = 0.005):
        super().__init__(daemon=True)
        self.nvml, self.h, self.period, self.rows, self.done = nvml, handle, period, [], threading.Event()

    def run(self):
        nvml = self.nvml
        while not self.done.is_set():
            clk = nvml.nvmlDeviceGetClockInfo(self.h, nvml.NVML_CLOCK_SM)
            pw = nvml.nvmlDeviceGetPowerUsage(self.h) / 1e3
            why = nvml.nvmlDeviceGetCurrentClocksEventReasons(self.h)
            self.rows.append((clk, pw, bool(why & POWER_CAP)))
            time.sleep(self.period)

    def stop(self):
        self.done.set()
        self.join()
        return self.rows


def sustained(fn, nvml, handle, seconds: float, calls_a_graph: int = 8):
    """Replay a graph of ``calls_a_graph`` calls of ``fn`` back to back for about ``seconds``;
    returns (us a call, :class:`Sampler` rows, joules over the window, seconds of the window)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls_a_graph):
            fn()
    for _ in range(20):  # warm: reach the steady clock before the window
        graph.replay()
    torch.cuda.synchronize()
    sampler = Sampler(nvml, handle)
    e0 = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    sampler.start()
    t0, replays = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            graph.replay()
        replays += 10
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    rows = sampler.stop()
    joules = (nvml.nvmlDeviceGetTotalEnergyConsumption(handle) - e0) / 1e3
    return dt / (replays * calls_a_graph) * 1e6, rows, joules, dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", required=True, help="a drafter kind (attention.KINDS)")
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--page", type=int, default=32)
    ap.add_argument("--layout", choices=("nhd", "hnd", "trtllm"), default="trtllm")
    ap.add_argument("--against", default="", help="comma list of kernel .py files timed beside today's")
    ap.add_argument("--fa4", action="store_true", help="FlashAttention-4 beside (attention.make_fa4)")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if args.seconds <= 0 or args.seconds > 10:
        refuse(f"--seconds {args.seconds}: give 0 < seconds <= 10")
    A.PAGE = args.page
    ctx = use_kind(args.kind)
    import pynvml  # nvidia-ml-py: only where the GPU is (lab/fa4_wheels.sh fetches its wheel beside FA4's)

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    kernels = {"today": g} | {f: kernel_at(f) for f in args.against.split(",") if f}
    mask, scale = MaskSpec(causal=False, window=None if A.FULL else A.W), A.D ** -0.5
    print(f"{torch.cuda.get_device_name()}; kind {args.kind}; power limit "
          f"{pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3:.0f} W", flush=True)
    for n in [int(x) for x in args.batches.split(",")]:
        (q, cache, kb, vb), dense, cfg = inputs(n, ctx, args.layout, "random")
        runs = {name: (lambda m=m: m.launch(q, cache, kb, vb, mask, scale, num_splits=cfg.num_splits))
                for name, m in kernels.items()}
        if args.fa4:
            if A.fa4_varlen_func is None:
                print(f"--fa4: FlashAttention-4 is not importable here ({A.FA4_MISSING})", flush=True)
            else:
                runs["FA4"] = A.make_fa4(dense, q)
        for _ in range(args.rounds):
            for name, fn in runs.items():
                err = A.oracle_error(fn(), dense)
                us, rows, joules, dt = sustained(fn, pynvml, handle, args.seconds)
                clk = sorted(r[0] for r in rows)
                capped = sum(r[2] for r in rows) / max(len(rows), 1)
                calls = dt / (us * 1e-6)
                print(f"batch {n} {name}: {us:.1f} us a call, SM clock median {clk[len(clk) // 2]} / p10 "
                      f"{clk[len(clk) // 10]} MHz, {joules / dt:.0f} W, {joules / calls * 1e3:.3f} mJ a call, "
                      f"power-capped {capped:.0%} of {len(rows)} samples, oracle err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
