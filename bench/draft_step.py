"""Draft-step time of the reference host at MiniMax-M3.1-Flash DSpark shapes, against a floor.

Random weights in the DFlash target layout, built directly on the GPU in bf16 (drafter
reference, section 3: 5 windowed non-causal layers, h 6144, 64/4 heads, head_dim 128,
rotary 64, W 4096, B 7, V 200064, Markov rank 256, confidence head with Markov). Each
sequence holds a ``--context`` token context (only its last W-1 tokens are projected: the
rest is invisible). For each batch size: eager and CUDA-graph step time (CUDA events,
median). The graph is timed two ways: synced (host waits after every step, so the host's
launch of the graph's ~130 kernels is in the time) and back to back (10 replays between
two events, as a serving loop issues them; ``graph / floor`` uses this one). Against

- memory floor: bytes the step must read once (weights it touches: layers, final norm,
  lm_head, Markov w2, confidence proj; plus K/V of the W-1 visible context tokens of every
  layer and sequence) over the copy ceiling measured in the same run (``timing.copy_bandwidth``
  of 4 GiB: bytes read + written per second);
- compute floor: the step's matmul FLOPs over a bf16 GEMM rate measured in the same run
  (``graph / floor`` divides by the larger floor); and the same FLOPs over the GEMM rate
  after 2 s of GEMMs, when the card runs at its power limit as it does through a timed
  run of batch-64 steps (``graph / that floor``).

The drafter is the shipped MiniMax adapter's compilation of synth's raw config (scale ``full``:
the real shapes), so the bench runs what a conversion serves.

Usage: ``python bench/draft_step.py [--batches 1 16 64] [--context 32768] [--tiny]``
(``--tiny``: synth's tiny scale, also runs on CPU, eager only; a smoke run).
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch

import timing
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.converted_config import flatten
from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.convert.synth import source_config
from draftsmith.framework.runtime import DFlashDraftModel, DraftStepGraph


def minimax_config(tiny: bool) -> dict:
    """The converted ``config.json`` of the shipped MiniMax DSpark adapter, compiled from the raw
    config that ``synth`` writes at scale ``full`` (the real shapes) or ``tiny``: the same
    compile path a conversion takes, so the bench runs what the product serves."""
    adapter = load_adapter("minimax_dspark")
    return flatten(adapter, source_config(adapter, "tiny" if tiny else "full"))


def random_model(config: dict, device: torch.device, lowering: str | None) -> DFlashDraftModel:
    """The drafter with random bf16 weights made on ``device`` in the target layout, plus a
    random target embedding / LM head."""
    model = DFlashDraftModel(ResolvedDrafter.from_config(config), device=device, dtype=torch.bfloat16, lowering=lowering)
    g = torch.Generator(device).manual_seed(0)
    weights = {}
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            t = 0.1 * torch.randn(p.shape, generator=g, device=device)
        elif name.endswith("bias"):
            t = torch.zeros(p.shape, device=device)
        else:
            t = torch.randn(p.shape, generator=g, device=device) * p.shape[-1] ** -0.5
        weights[name] = t.to(torch.bfloat16)
    model.load_weights(weights)
    del weights
    v, h = config["vocab_size"], config["hidden_size"]
    emb = torch.nn.Embedding.from_pretrained(torch.randn(v, h, generator=g, device=device).to(torch.bfloat16))
    head = torch.nn.Linear(h, v, bias=False, device="meta")
    head.weight = torch.nn.Parameter((torch.randn(v, h, generator=g, device=device) * h**-0.5).to(torch.bfloat16),
                                     requires_grad=False)
    model.load_weights_from_target_model(SimpleNamespace(model=SimpleNamespace(embed_tokens=emb), lm_head=head))
    return model


def fill_context(model: DFlashDraftModel, n: int, context: int, page: int):
    """A cache of ``n`` sequences at ``context`` tokens: the invisible prefix is skipped, the
    last W-1 rows come from random target hidden states."""
    cache = model.make_cache(n, page_size=page, max_context=context)
    width = model.cfg.dims.num_target_layers * model.cfg.dims.target_hidden
    first = min(cache.needed_from(l, context) for l in range(model.cfg.dims.num_layers))
    g = torch.Generator(model.device).manual_seed(1)
    for s in range(n):
        cache.advance(s, first)
        model.append_context(cache, torch.randn(context - first, width, generator=g, device=model.device), seq=s)
    return cache


def step_bytes(model: DFlashDraftModel, n: int, context: int) -> int:
    """Bytes one step must read once: touched weights + visible context K/V."""
    skip = ("fc.", "hidden_norm.", "markov_head.markov_w1.")  # context-only, or gathered rows
    w = sum(p.numel() * p.element_size() for name, p in model.named_parameters() if not name.startswith(skip))
    w += model.lm_head.weight.numel() * model.lm_head.weight.element_size()
    s = model.shape
    kv = 0
    for m in model.cfg.masks:
        seen = context if m.window is None else min(context, m.window - 1)
        kv += 2 * n * seen * s.kv_heads * s.head_dim * 2
    return w + kv


def step_flops(model: DFlashDraftModel, n: int, context: int) -> float:
    """Matmul FLOPs of one step (projections, attention, lm_head, Markov w2)."""
    c, s = model.cfg, model.shape
    t = n * c.block_size
    per_tok = (s.hidden * (s.heads + 2 * s.kv_heads) * s.head_dim + s.heads * s.head_dim * s.hidden
               + 3 * s.hidden * s.inter)
    keys = sum((context if m.window is None else min(context, m.window - 1)) + c.block_size for m in c.masks)
    attn = 4 * t * s.heads * s.head_dim * keys
    heads = n * c.max_draft_len * c.dims.vocab * (s.hidden + c.heads.markov_rank)
    return 2.0 * (t * per_tok * c.dims.num_layers + heads) + attn


def time_ms(fn, device: torch.device, iters: int, reps: int = 1) -> float:
    """Median ms per call of ``fn()`` after 3 warm-ups: ``iters`` runs of ``reps`` calls issued
    back to back (no host sync between them, as a serving loop issues steps) between two CUDA
    events (a wall clock on CPU); ``reps=1`` waits for every call."""
    for _ in range(3):
        fn()
    out = []
    for _ in range(iters):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / reps)
        else:
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            out.append((time.perf_counter() - t0) * 1e3 / reps)
    return statistics.median(out)


def gemm_rate(device: torch.device, sustained_s: float = 0.0) -> float:
    """bf16 8192^3 matmul FLOP/s (GPU) or a small fp32 one (CPU). ``sustained_s > 0``: first
    run GEMMs for that many seconds, so that the card is at its power limit (an H200 reaches
    its 700 W cap within about a second of GEMMs and lowers its SM clock), then time."""
    m = 8192 if device.type == "cuda" else 512
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(m, m, device=device, dtype=dt)
    b = torch.randn(m, m, device=device, dtype=dt)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < sustained_s:
        for _ in range(20):
            a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
    ms = time_ms(lambda: a @ b, device, 10)
    return 2 * m**3 / (ms * 1e-3)


def _profiled(fn):
    """``torch.profiler`` (CUDA activity) over 3 calls of ``fn``, each followed by a sync,
    after one call outside it."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
            torch.cuda.synchronize()
    return prof


def profile_step(fn, n: int, top: int = 25) -> None:
    """Device time per kernel name over 3 eager steps (torch.profiler), largest first."""
    prof = _profiled(fn)
    rows = [(getattr(e, "device_time_total", 0) / 3, e.count // 3, e.key) for e in prof.key_averages()]
    rows = [r for r in rows if r[0] > 0]
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"# profile batch {n}: kernel time per step {total / 1e3:.3f} ms")
    for us, cnt, key in rows[:top]:
        print(f"#   {us / 1e3:8.3f} ms  x{cnt:<4d} {key[:110]}")


def graph_gaps(replay, n: int, top: int = 12) -> None:
    """Idle device time inside one graph replay (torch.profiler over 3 replays): kernels per
    step, the sum of their device times, the sum of the gaps between one kernel's end and
    the next one's start, and the largest gaps with the kernels on either side."""
    prof = _profiled(replay)
    ev = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                if e.device_type.name == "CUDA" and e.time_range.end > e.time_range.start)
    if not ev:
        print(f"# gaps batch {n}: no device events recorded")
        return
    steps, cur = [], [ev[0]]
    for e in ev[1:]:  # a new replay starts after a gap of more than 50 us (host syncs between replays)
        if e[0] - cur[-1][1] > 50:
            steps.append(cur)
            cur = []
        cur.append(e)
    steps.append(cur)
    st = max(steps, key=len)
    busy = sum(b - a for a, b, _ in st)
    gaps = [(st[i][0] - st[i - 1][1], st[i - 1][2], st[i][2]) for i in range(1, len(st))]
    print(f"# gaps batch {n}: {len(st)} kernels, span {(st[-1][1] - st[0][0]) / 1e3:.3f} ms, kernels "
          f"{busy / 1e3:.3f} ms, gaps {sum(g for g, _, _ in gaps) / 1e3:.3f} ms "
          f"(median {statistics.median([g for g, _, _ in gaps]) if gaps else 0:.2f} us)")
    for g, a, b in sorted(gaps, reverse=True)[:top]:
        print(f"#   {g:7.2f} us  {a[:50]}  ->  {b[:50]}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--lowering", default=None, help="one lowering for all layers (default: per-layer table)")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also print the top kernels of one eager step")
    ap.add_argument("--gaps", action="store_true", help="also print the idle gaps inside one graph replay")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    bw, rate = timing.copy_bandwidth(4 << 30) * 1e12, gemm_rate(dev)  # bytes/s, FLOP/s
    rate_hot = gemm_rate(dev, sustained_s=2.0) if dev.type == "cuda" else rate
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"# {name}, torch {torch.__version__}; copy {bw / 1e12:.2f} TB/s (read+write), "
          f"gemm {rate / 1e12:.0f} TFLOP/s (after 2 s of GEMMs, at the power limit: {rate_hot / 1e12:.0f})")
    t0 = time.perf_counter()
    model = random_model(minimax_config(args.tiny), dev, args.lowering)
    print(f"# model built in {time.perf_counter() - t0:.1f} s; lowerings {model.layer_lowerings}; "
          f"context {args.context}, page {args.page}")
    print("| batch | eager ms | graph ms, synced | graph ms, back to back | memory floor ms | compute floor ms "
          "| graph / floor | compute floor ms, power-limited | graph / that floor | MB read | GFLOP |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.batches:
        cache = fill_context(model, n, args.context, args.page)
        anchor = torch.randint(0, model.cfg.dims.vocab, (n,), device=dev)
        eager = time_ms(lambda: model.draft(anchor, cache), dev, args.iters)
        graph = b2b = float("nan")
        if dev.type == "cuda":
            g = DraftStepGraph(model, cache)
            graph = time_ms(lambda: g.replay(anchor), dev, args.iters)
            b2b = time_ms(lambda: g.replay(anchor), dev, args.iters, reps=10)
            r, e = g.replay(anchor), model.draft(anchor, cache)
            agree = (r.tokens == e.tokens).float().mean().item()
            print(f"# batch {n}: graph vs eager max |dlogits| {(r.logits - e.logits).abs().max().item():.2e}, "
                  f"tokens agree {agree:.3f}")
            if args.gaps:
                graph_gaps(lambda: g.replay(anchor), n)
            del g, r, e
        if args.profile and dev.type == "cuda":
            profile_step(lambda: model.draft(anchor, cache), n)
        nbytes, flops = step_bytes(model, n, args.context), step_flops(model, n, args.context)
        mem_ms, cmp_ms, hot_ms = nbytes / bw * 1e3, flops / rate * 1e3, flops / rate_hot * 1e3
        best = b2b if b2b == b2b else eager  # back-to-back graph time when there is one
        print(f"| {n} | {eager:.3f} | {graph:.3f} | {b2b:.3f} | {mem_ms:.3f} | {cmp_ms:.3f} | "
              f"{best / max(mem_ms, cmp_ms):.2f} | {hot_ms:.3f} | {best / max(mem_ms, hot_ms):.2f} | "
              f"{nbytes / 1e6:.0f} | {flops / 1e9:.0f} |", flush=True)
        del cache
        if dev.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
