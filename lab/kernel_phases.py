"""Where the Gluon kernel's time goes, phase by phase, at the MiniMax drafter shape (SM90 GPU).

Runs the lab's phase-timer build of the product kernel (``timed_kernel.load()``: today's kernel
with ``kernel_phases.patch`` applied; its ``launch(timer=...)`` has each program stamp the SM
cycle counter at each phase, see its ``TIMER_SLOTS``) inside a CUDA graph, L2
flushed before each replay (``bench/attention.py``'s method), and prints per batch:

- a side-by-side row: the product kernel's replay and per-kernel device times (attention,
  merge), the timed build's (the timer's own cost), and the floor: the window's bytes at
  the copy bandwidth measured in the same run;
- one line per batch on the multiprocessors: busy fraction, gaps between programs, the ring's
  streaming rate;
- one table of phases and of the time the ring's two sides waited for each other, in microseconds (cycles over the clock rate the programs' own
  global-timer readings give), median / 90th percentile / max over programs and replays,
  for three roles: the first split (window edge tiles), middle splits, the last split (the
  block's keys).

``--splits 15,24``: those split counts instead of the lowering's choice; ``--window``: another W;
``--kind``: a drafter kind's shape (``attention.KINDS``, as ``lab/gluon_ab.py --kind``), with
``--layout trtllm --page 32`` for TensorRT-LLM's pool.
Usage: ``python3 lab/kernel_phases.py [--batches 1,16,64]``.
"""

import argparse
import datetime

import torch

import _paths  # noqa: F401  (bench/ on sys.path)
import attention
import timed_kernel
from gluon_ab import launch_config, use_kind
from attention import B, D, HKV, HQ, W, bench_graph, capture_graph, copy_bandwidth, flush_l2, kernel_us, make_inputs, needed_bytes
from draftsmith.lowering import gluon_window_block as gwb
from draftsmith.lowering.base import MaskSpec

SLOT = {}  # timer slot name -> index, the timed build's TIMER_SLOTS (filled by main)

# (label, from slot, to slot): each a span inside one program, in SM cycles.
PHASES = (
    ("entry -> consumer 0 starts (ctx read, barriers)", "clock_entry", "clock_consumer"),
    ("consumer start -> Q in registers", "clock_consumer", "clock_q"),
    ("consumer start -> first ring tile landed", "clock_consumer", "clock_first_tile"),
    ("producer start -> first TMA issued", "clock_producer", "clock_first_tma"),
    ("first -> last TMA issued", "clock_first_tma", "clock_last_tma"),
    ("first ring tile -> ring done", "clock_first_tile", "clock_interior_done"),
    ("ring done -> first edge tile landed", "clock_interior_done", "clock_first_private"),
    ("ring done -> edge tiles done", "clock_interior_done", "clock_private_done"),
    ("private done -> stores issued", "clock_private_done", "clock_stored"),
    ("entry -> stores issued (program)", "clock_entry", "clock_stored"),
)
# (label, slot): cycle totals a program accumulates over its ring tiles.
TOTALS = (
    ("producer waited for free slots (sum)", "producer_wait"),
    ("consumer 0 waited for landed tiles (sum)", "consumer_wait"),
)


def timed_runs(fn, timer, reps):
    """``reps`` graph replays of ``fn`` (L2 flushed before each); the timer after each."""
    graph = capture_graph(fn)
    out = []
    for _ in range(reps):
        timer.fill_(-1)  # poisoned: a slot a program never reached stays -1
        flush_l2()
        graph.replay()
        out.append(timer.clone())
    torch.cuda.synchronize()
    return torch.stack(out)  # [reps, programs, splits, slots]


def quantiles(x):
    if x.numel() == 0:
        return "-", "-", "-"
    q = torch.quantile(x.double(), torch.tensor([0.5, 0.9], dtype=torch.float64))
    return f"{q[0]:.2f}", f"{q[1]:.2f}", f"{x.max().item():.2f}"


def clock_ghz(t):
    """The SM clock the programs ran at (GHz): their cycles entry -> stores over the same span in
    global-timer nanoseconds, summed over every program of timer stack ``t``."""
    ns = t[..., SLOT["ns_stored"]] - t[..., SLOT["ns_entry"]]
    cyc = t[..., SLOT["clock_stored"]] - t[..., SLOT["clock_entry"]]
    return cyc.sum().item() / max(1, ns.sum().item())


def phase_table(t, num_splits):
    """Print the phase table of timer stack ``t`` ``[reps, programs, splits, slots]``."""
    ghz = clock_ghz(t)
    start = t[..., SLOT["ns_entry"]]
    first = start.amin(dim=(1, 2), keepdim=True)
    skew = (start - first).double() / 1e3
    end = (t[..., SLOT["ns_stored"]] - first).double() / 1e3
    print(f"clock {ghz:.3f} GHz (programs' cycles over their global-timer ns); program starts spread "
          f"{skew.median():.2f} us median, {skew.max():.2f} max; last program's stores "
          f"{end.amax(dim=(1, 2)).median():.2f} us after the first program's entry (median over replays)")
    roles = {"first split": [0], "middle splits": list(range(1, num_splits - 1)), "last split": [num_splits - 1]}
    if num_splits == 1:
        roles = {"one split": [0]}
    elif num_splits == 2:
        roles = {"first split": [0], "last split": [1]}
    tiles = {r: t[:, :, s][..., SLOT["ring_tiles"]].double().median().item() for r, s in roles.items()}
    priv = {r: t[:, :, s][..., SLOT["private_tiles"]].double().median().item() for r, s in roles.items()}
    head = " | ".join(f"{r} ({tiles[r]:.0f} ring + {priv[r]:.0f} private tiles) median / p90 / max" for r in roles)
    print(f"| phase (us) | {head} |")
    print("|---|" + "---|" * len(roles))
    for label, a, b in PHASES:
        cells = []
        for r, s in roles.items():
            x = t[:, :, s]
            ok = (x[..., SLOT[a]] >= 0) & (x[..., SLOT[b]] >= 0)
            span = (x[..., SLOT[b]] - x[..., SLOT[a]])[ok].double() / (ghz * 1e3)
            cells.append(" / ".join(quantiles(span)))
        print(f"| {label} | " + " | ".join(cells) + " |")
    for label, a in TOTALS:
        cells = []
        for r, s in roles.items():
            x = t[:, :, s]
            ring = x[..., SLOT["ring_tiles"]] > 0
            cells.append(" / ".join(quantiles(x[..., SLOT[a]][ring].double() / (ghz * 1e3))))
        print(f"| {label} | " + " | ".join(cells) + " |")


def sm_table(t, tile_bytes):
    """Per multiprocessor, from the programs' global-timer stamps and ``smid``: how much of the
    kernel's span some program of this SM is between entry and its stores (busy), the gap from
    one program's stores to the next program's entry on the same SM, and the ring's rate (bytes
    of interior tiles over first-tile-to-ring-done time, cycles over the clock) per program and
    times the SMs in use: the bandwidth the grid would draw if every SM streamed at once."""
    ghz = clock_ghz(t)
    busy, gaps, rates, waves = [], [], [], []
    for rep in t:
        x = rep.reshape(-1, rep.shape[-1])
        start, stop, sm = x[:, SLOT["ns_entry"]], x[:, SLOT["ns_stored"]], x[:, SLOT["smid"]]
        span = (stop.max() - start.min()).item()
        for s in sm.unique():
            on = (sm == s).nonzero().flatten()
            order = on[start[on].argsort()]
            a, b = start[order], stop[order]
            busy.append((b - a).sum().item() / span)
            gaps += (a[1:] - b[:-1]).tolist()
            waves.append(len(order))
        ring = x[:, SLOT["ring_tiles"]].double()
        dt = (x[:, SLOT["clock_interior_done"]] - x[:, SLOT["clock_first_tile"]]).double() / ghz  # ns
        ok = (ring > 0) & (dt > 0)
        rates += (ring[ok] * tile_bytes / dt[ok]).tolist()  # GB/s per program
    sms = len(t[0].reshape(-1, t.shape[-1])[:, SLOT["smid"]].unique())
    r = torch.tensor(rates, dtype=torch.float64)
    g = torch.tensor(gaps, dtype=torch.float64) / 1e3
    print(f"SMs used {sms}; programs per SM {min(waves)}-{max(waves)}; busy fraction of the kernel's span per SM "
          f"median {torch.tensor(busy).median():.3f}, min {min(busy):.3f}; gap between programs on one SM "
          f"median / p90 / max {' / '.join(quantiles(g))} us; ring rate per program median "
          f"{r.median():.1f} GB/s (x {sms} SMs = {r.median() * sms / 1e3:.2f} TB/s if all stream at once)")


def main():
    global B, D, HKV, HQ, W
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--splits", default=None, help="comma list of split counts (default: the lowering's choice)")
    ap.add_argument("--window", type=int, default=W, help="two-sided window W (attention.py's --window)")
    ap.add_argument("--kind", default=None, help="a drafter kind's shape (attention.KINDS); sets --ctx and --window")
    ap.add_argument("--layout", choices=("nhd", "hnd", "trtllm"), default="nhd", help="page storage (attention.py's)")
    ap.add_argument("--page", type=int, default=attention.PAGE, help="tokens a page (TensorRT-LLM's: 32)")
    ap.add_argument("--page-order", choices=attention.PAGE_ORDERS, default="random",
                    help="attention.py's --page-order (shared: every sequence's context in the same pages, K/V in L2)")
    ap.add_argument("--variant", action="append", default=[],
                    help="a kernel variant (lab/variants/*.patch) applied before the timer; repeat for an On-top-of chain")
    ap.add_argument("--switch", action="append", default=[],
                    help="a variant's module-level switch set True (e.g. WIDE_KV, WIDE_Q_SMEM); repeat for more")
    ap.add_argument("--wide", action="store_true", help="launch the timed build with wide=True (wide-ring.patch's build)")
    args = ap.parse_args()
    attention.PAGE = args.page
    if args.kind:
        args.ctx = use_kind(args.kind)  # the lab's A/B sets a kind's shape the same way
        HQ, HKV, D, B, W = attention.HQ, attention.HKV, attention.D, attention.B, attention.W
    else:
        W = attention.W = args.window  # attention.make_inputs sizes the ring from it
    if not gwb.available():
        raise SystemExit("needs triton 3.6's Gluon and an SM90 GPU")
    try:
        TIMED = timed_kernel.load(args.variant, args.switch)
    except (timed_kernel.PatchError, ValueError) as e:
        raise SystemExit(str(e)) from None
    SLOT.update({name: i for i, name in enumerate(TIMED.TIMER_SLOTS)})
    copy_tbs = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; copy {copy_tbs:.2f} TB/s")
    mask, scale = MaskSpec(causal=False, window=None if attention.FULL else W), D ** -0.5
    print(f"# shape: {args.kind or 'MiniMax'} Hq {HQ}, Hkv {HKV}, D {D}, B {B}, "
          f"{'full attention' if attention.FULL else f'W {W}'}, ctx {args.ctx}, {args.layout} pages of {args.page}")
    print("| batch | splits | floor us | replay us | attention kernel us | merge us | "
          "timed replay us | timed kernel us |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    tables = []
    for n in map(int, args.batches.split(",")):
        q, cache, kb, vb = make_inputs(n, args.ctx, layout=args.layout, order=args.page_order)
        chosen = launch_config(n, cache, q.device).num_splits
        for splits in map(int, (args.splits or str(chosen)).split(",")):
            timer = torch.full((n * HKV, splits, len(TIMED.TIMER_SLOTS)), -1, dtype=torch.int64, device="cuda")
            kw = dict(num_splits=splits)

            def plain():
                return gwb.launch(q, cache, kb, vb, mask, scale, **kw)

            tkw = dict(kw, wide=True) if args.wide else kw

            def timed():
                return TIMED.launch(q, cache, kb, vb, mask, scale, timer=timer, **tkw)

            err = (timed().float() - plain().float()).abs().max().item()
            if err != 0.0:
                print(f"(batch {n}: the timed build's output differs from the product kernel's by up to {err:.3g})")
            per = kernel_us(plain, per_kernel=True)
            attn = sum(v for k, v in per.items() if "gluon" in k)
            merge = sum(v for k, v in per.items() if "gluon" not in k)
            tper = kernel_us(timed, per_kernel=True)
            floor = needed_bytes(n) / (copy_tbs * 1e12) * 1e6
            print(f"| {n} | {splits} | {floor:.1f} | {bench_graph(plain) * 1e3:.1f} | {attn:.1f} | "
                  f"{merge:.1f} | {bench_graph(timed) * 1e3:.1f} | "
                  f"{sum(v for k, v in tper.items() if 'gluon' in k):.1f} |", flush=True)
            tables.append((n, splits, timed_runs(timed, timer, args.reps).cpu()))
    for n, splits, t in tables:
        print(f"\n## batch {n}, {splits} splits, {n * HKV} programs per split")
        phase_table(t, splits)
        sm_table(t, 2 * (128 if args.wide else 64) * D * 2)  # a ring tile: 64 (wide: 128) keys of K and V, bf16


if __name__ == "__main__":
    main()
