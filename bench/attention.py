"""Benchmark of block-attention lowerings at the MiniMax-M3.1 drafter shape (one CUDA GPU).

Shape: Hq 64, Hkv 4, D 128, B 7, window 4096 (non-causal; ``--window``), bf16, page 64, every sequence at
context ``--ctx`` (32k), ring block tables of ``ceil(4095/64)+1 = 65`` pages.

Rows: ``triton_window_block``; ``window_decode_merge`` (if importable); SDPA with a dense
boolean mask over the ring's stored keys: plainly (``enable_gqa``, queries ``[N, Hq, B, D]``)
after gathering K/V from the paged cache, and with GQA packed as ``[N, Hkv, G*B, D]``
queries (K/V not repeated) both after the gather and on pre-gathered K/V;
``flex_attention`` (compiled) on pre-gathered K/V.

Units: time in microseconds, the median of CUDA-graph replays with L2 flushed before each
(``triton.testing.do_bench`` median, also L2-flushed, where a row cannot be captured); bandwidth in TB/s of the bytes a window needs: per sequence ``(W-1+B)`` keys x
``Hkv * D`` x 2 (K and V) x 2 bytes, plus q and out (``2 * B * Hq * D * 2`` bytes); the
copy ceiling is a 2 GiB device-to-device copy counting bytes read plus written.

Per-rank shapes (``--tp 1,2,4,8``): TensorRT-LLM's tensor parallelism gives a rank
``Hq // tp`` query heads and ``ceil(Hkv / tp)`` KV heads (KV duplicated past ``Hkv`` ranks):
64 / 4, 32 / 2, 16 / 1, 8 / 1 at the MiniMax shape; ``--heads`` / ``--kv-heads`` set one shape
directly. ``--layout`` takes a comma list; ``arena`` is TensorRT-LLM's VANILLA dense arena
``[slots, L, max_ctx + B, Hkv, D]`` (``max_ctx = --ctx``, one page of ``ctx + B`` tokens a
sequence, layer 1 of 2 read in place). Each (tp, layout) prints its table as it finishes.

``--sweep`` also times tile/split variants of the Triton kernel (written to ``--log``).
The timing method, ceilings and shape are ``timing.py``'s (shared by the benches). ``--tiny``:
``timing.TINY``'s shape, a smoke run that also runs on CPU under ``TRITON_INTERPRET=1``
(``tests/docs/test_benches.py``).
"""

import argparse
import datetime
import json
import math

import torch


import read_ceiling  # noqa: E402
import timing  # noqa: E402
from timing import (MINIMAX, TINY, bench_graph, capture_graph, copy_bandwidth, flush_l2,  # noqa: E402,F401
                    kernel_us, sequence_bytes, timed)
from draftsmith.lowering.base import MaskSpec, PagedKV  # noqa: E402
from draftsmith.lowering import gluon_window_block  # noqa: E402
from draftsmith.lowering.jit import sm_count  # noqa: E402
from draftsmith.lowering.triton_window_block import Config, choose_config, tma_fits, triton_window_block  # noqa: E402

try:
    from draftsmith.lowering.window_decode_merge import window_decode_merge
except Exception:  # noqa: BLE001 - another team's module; the row is skipped without it
    window_decode_merge = None

try:  # FlashAttention-4 (flash-attn-4, CuTe DSL): the peer; its row is skipped with a note without it
    from flash_attn.cute.interface import flash_attn_varlen_func as fa4_varlen_func
    FA4_MISSING = None
except Exception as _e:  # noqa: BLE001
    fa4_varlen_func, FA4_MISSING = None, repr(_e)[:200]

HQ, HKV, D, B, W, PAGE = MINIMAX.hq, MINIMAX.hkv, MINIMAX.d, MINIMAX.b, MINIMAX.w, MINIMAX.page  # --tiny: TINY's
DEV = timing.device()  # the GPU; the CPU (TRITON_INTERPRET=1) for --tiny runs without one
FA4_PAGE = 128  # --fa4-page: FA4's page size; 128 = whole 128-key tiles per page, so its TMA path is taken
LAYOUTS = ("nhd", "hnd", "trtllm", "arena")  # --layout: K/V storage (make_inputs)
PAGE_ORDER = "random"  # --page-order: where a sequence's pages lie in the pool, for every paged row alike
PAGE_ORDERS = ("random", "sequential", "shared")  # make_inputs' orders (the lab's tools take the same)
FULL = False  # --full (or a --kind of full attention): W is then ctx + B, a window no key is outside of
#: --kind: each drafter kind's attention shape, from the adapters (synth configs, adapters/*.yaml):
#: (Hq, Hkv, D, B, W or None for full attention, context tokens a sequence, the adapters of that shape)
KINDS = {
    "dspark_minimax": (64, 4, 128, 7, 4096, 32768, "minimax_dspark, minimax_dspark_v0"),
    "dflash2_minimax": (48, 8, 128, 16, 4096, 32768, "minimax_dflash2"),
    "dflash_w2048": (32, 8, 128, 16, 2048, 32768, "zlab_dflash2, meta_muse_glimmer, trtllm_dflash (sliding layers)"),
    "dflash_full": (32, 8, 128, 16, None, 8192, "zlab_dflash, trtllm_dflash (its full layer)"),
    "dspark_full": (32, 8, 128, 7, None, 8192, "deepseek_dspark_dense"),
}


def make_inputs(n, ctx, seed=0, layout="nhd", order="random"):
    """``layout``: page storage ``nhd`` = ``[pages, P, Hkv, D]``, ``hnd`` = ``[pages, Hkv, P, D]``
    (TensorRT-LLM's per-block layout), ``trtllm`` = one ``[pages, 2, Hkv, P, D]`` pool with K at
    ``[:, 0]`` and V at ``[:, 1]`` (TensorRT-LLM's paged DFlash context pool, read in place),
    each passed as its ``[pages, P, Hkv, D]`` view. ``order``: ``random`` scatters the ring's
    pages over the pool (a permutation), ``sequential`` gives sequence ``n`` pages
    ``n * ring ... n * ring + ring - 1`` in ring order, ``shared`` gives every sequence the same
    ``ring`` pages (scattered), so that the context's K/V, read by every program, stay in L2: the
    kernels run bound by their own instructions rather than by memory (see ``PAGE_ORDER``)."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    ring = math.ceil((W - 1) / PAGE) + 1
    total = ring if order == "shared" else n * ring
    kw = dict(device=DEV, dtype=torch.bfloat16, generator=g)
    if layout == "arena":  # [slots, L, max_ctx + B, Hkv, D], one spare slot; layer 1 of 2, a view
        k_arena = torch.randn(n + 1, 2, ctx + B, HKV, D, **kw)
        v_arena = torch.randn(n + 1, 2, ctx + B, HKV, D, **kw)
        ids = (torch.randperm(n + 1, device=DEV, generator=g)[:n] if order == "random"
               else torch.zeros(n, dtype=torch.long, device=DEV) if order == "shared" else torch.arange(n, device=DEV))
        cache = PagedKV(k_arena[:, 1], v_arena[:, 1], ids[:, None].to(torch.int32),
                        torch.full((n,), ctx, dtype=torch.int32, device=DEV))
        return torch.randn(n, B, HQ, D, **kw), cache, torch.randn(n, B, HKV, D, **kw), torch.randn(n, B, HKV, D, **kw)
    if layout == "trtllm":
        pool = torch.randn(total, 2, HKV, PAGE, D, **kw)
        k_pages, v_pages = pool[:, 0].transpose(1, 2), pool[:, 1].transpose(1, 2)
    elif layout == "hnd":
        k_pages = torch.randn(total, HKV, PAGE, D, **kw).transpose(1, 2)
        v_pages = torch.randn(total, HKV, PAGE, D, **kw).transpose(1, 2)
    else:
        k_pages = torch.randn(total, PAGE, HKV, D, **kw)
        v_pages = torch.randn(total, PAGE, HKV, D, **kw)
    ids = torch.randperm(total, device=DEV, generator=g) if order != "sequential" else torch.arange(total, device=DEV)
    bt = (ids.expand(n, ring) if order == "shared" else ids.reshape(n, ring)).to(torch.int32).contiguous()
    cache = PagedKV(k_pages, v_pages, bt, torch.full((n,), ctx, dtype=torch.int32, device=DEV))
    q = torch.randn(n, B, HQ, D, **kw)
    kb = torch.randn(n, B, HKV, D, **kw)
    vb = torch.randn(n, B, HKV, D, **kw)
    return q, cache, kb, vb


class Dense:
    """Gather the ring's stored keys + the block keys, then one masked attention per KV head.

    Queries packed as ``[N, Hkv, G*B, D]`` (row ``g*B + j``); ``kpos`` are key positions.
    All sequences share one context length here, so the mask is ``[G*B, L]``.
    """

    def __init__(self, q, cache, kb, vb, ctx):
        n = q.shape[0]
        self.n, self.ctx = n, ctx
        ring, page = cache.block_table.shape[1], cache.page_size
        oldest = max(0, ((ctx - 1) // page) * page - (ring - 1) * page)
        if ring == 1:  # one page holds the whole context (the arena): the keys the window reaches
            oldest = max(0, ctx - (W - 1))
        t = torch.arange(oldest, ctx, device=DEV)
        self.pages = cache.block_table.long()[:, (t // page) % ring]  # [N, Lc]
        self.slots = (t % page)[None, :].expand(n, -1)
        self.kpos = torch.cat([t, ctx + torch.arange(B, device=DEV)])
        qpos = ctx + torch.arange(B, device=DEV)
        ok = (qpos[:, None] - self.kpos[None, :]).abs() <= W - 1  # [B, L]
        self.mask = ok.repeat(HQ // HKV, 1)[None, None]  # [1, 1, G*B, L]
        self.q, self.cache, self.kb, self.vb = q, cache, kb, vb
        self.qp = self.pack_q(q)
        self.k, self.v = self.gather()

    @staticmethod
    def pack_q(q):
        n = q.shape[0]
        return q.view(n, B, HKV, HQ // HKV, D).permute(0, 2, 3, 1, 4).reshape(n, HKV, -1, D)

    @staticmethod
    def unpack(o, n):
        return o.view(n, HKV, HQ // HKV, B, D).permute(0, 3, 1, 2, 4).reshape(n, B, HQ, D)

    def gather(self):
        kc = self.cache.k_pages[self.pages, self.slots]  # [N, Lc, Hkv, D]
        vc = self.cache.v_pages[self.pages, self.slots]
        k = torch.cat([kc, self.kb], 1).transpose(1, 2)  # [N, Hkv, L, D]
        v = torch.cat([vc, self.vb], 1).transpose(1, 2)
        return k, v

    def sdpa(self, k, v):
        o = torch.nn.functional.scaled_dot_product_attention(self.qp, k, v, attn_mask=self.mask, scale=D ** -0.5)
        return self.unpack(o, self.n)

    def end_to_end(self):
        return self.sdpa(*self.gather())

    def plain_gqa(self):
        """The plain form: q ``[N, Hq, B, D]``, gathered K/V, ``enable_gqa``, mask ``[B, L]``."""
        k, v = self.gather()
        m = self.mask[:, :, :B]  # rows 0..B-1 of the packed mask are g = 0, j = 0..B-1
        o = torch.nn.functional.scaled_dot_product_attention(
            self.q.transpose(1, 2), k, v, attn_mask=m, scale=D ** -0.5, enable_gqa=True)
        return o.transpose(1, 2)

    def pregathered(self):
        return self.sdpa(self.k, self.v)


def make_flex(dense):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    kpos, ctx, g = dense.kpos, dense.ctx, HQ // HKV

    def mask_mod(b, h, q_idx, kv_idx):
        return (ctx + q_idx % B - kpos[kv_idx]).abs() <= W - 1

    L = dense.k.shape[2]
    bm = create_block_mask(mask_mod, None, None, g * B, L, device=DEV)
    flex = torch.compile(flex_attention, dynamic=False)

    def run():
        o = flex(dense.qp, dense.k, dense.v, block_mask=bm, scale=D ** -0.5)
        return dense.unpack(o, dense.n)

    return run


def make_fa4(dense, q):
    """FlashAttention-4's paged call on the same K/V values as the other rows.

    FA4 addresses absolute positions (page ``t // 128`` of a sequence's page table), not a
    ring, so each sequence gets pages for the positions from its window's first page to
    ``ctx + B - 1``: the stored context keys, then the block's own keys appended (its
    ``seqused_k = ctx + B``). Page table entries before the window point at one shared page of
    zeros: FA4 reads at least one tile it then masks, and a NaN there would reach its output.
    The window is FA4's bottom-right aligned ``(W - 1, W - 1)``: query ``j`` sits at key
    ``ctx + j``, the two-sided window of the drafter's mask.

    With ``PAGE_ORDER == "shared"`` the pages that hold only context keys are one set for every
    sequence (their keys are the same, as the ring cache's are), the pages from key ``ctx`` on
    (the block's keys) each sequence's own.
    """
    n, ctx = dense.n, dense.ctx
    per = -(-(ctx + B) // FA4_PAGE)
    first = max(0, ctx - (W - 1)) // FA4_PAGE
    own = per - first
    common = ctx // FA4_PAGE - first if PAGE_ORDER == "shared" else 0  # context-only pages every sequence shares
    kw = dict(device=DEV, dtype=q.dtype)
    k4 = torch.zeros(1 + common + n * (own - common), FA4_PAGE, HKV, D, **kw)
    v4 = torch.zeros_like(k4)
    table = torch.zeros(n, per, dtype=torch.int32, device=DEV)
    gen = torch.Generator(device=DEV).manual_seed(n)
    mine = n * (own - common)
    ids = (torch.arange(mine, device=DEV) if PAGE_ORDER == "sequential"
           else torch.randperm(mine, device=DEV, generator=gen))
    table[:, first:first + common] = 1 + torch.arange(common, dtype=torch.int32, device=DEV)
    table[:, first + common:] = 1 + common + ids.to(torch.int32).view(n, own - common)
    sel = (dense.kpos >= first * FA4_PAGE).nonzero().flatten()
    pos = dense.kpos[sel]
    pages = table.long()[:, pos // FA4_PAGE]  # [N, L]
    slots = (pos % FA4_PAGE)[None, :].expand(n, -1)
    k4[pages, slots] = dense.k[:, :, sel].transpose(1, 2)
    v4[pages, slots] = dense.v[:, :, sel].transpose(1, 2)
    seqused = torch.full((n,), ctx + B, dtype=torch.int32, device=DEV)

    def run():
        out = fa4_varlen_func(q, k4, v4, seqused_k=seqused, page_table=table, softmax_scale=D ** -0.5,
                              causal=False, window_size=(None, None) if FULL else (W - 1, W - 1), pack_gqa=True,
                              max_seqlen_q=B, max_seqlen_k=per * FA4_PAGE)
        return out[0] if isinstance(out, tuple) else out

    return run


def oracle_error(out, dense, rows=4):
    """Largest relative error of ``out [N, B, Hq, D]`` against a float64 attention written here
    (softmax over the two-sided window of the stored + block keys), over the first ``rows``
    sequences; inf when any of those rows is not finite (a NaN would slip past ``max``)."""
    worst = 0.0
    for i in range(min(rows, dense.n)):
        k = dense.k[i].double()  # [Hkv, L, D]
        v = dense.v[i].double()
        qi = dense.q[i].double().permute(1, 0, 2)  # [Hq, B, D]
        kh = k.repeat_interleave(HQ // HKV, 0)
        vh = v.repeat_interleave(HQ // HKV, 0)
        s = qi @ kh.transpose(1, 2) * D ** -0.5  # [Hq, B, L]
        qpos = dense.ctx + torch.arange(B, device=DEV)
        ok = (qpos[:, None] - dense.kpos[None, :]).abs() <= W - 1
        s = s.masked_fill(~ok[None], float("-inf"))
        ref = (torch.softmax(s, -1) @ vh).permute(1, 0, 2)  # [B, Hq, D]
        if not torch.isfinite(out[i]).all():
            return float("inf")
        worst = max(worst, ((out[i].double() - ref).norm() / ref.norm()).item())
    return worst


def needed_bytes(n):
    """Bytes ``n`` sequences need at the bench's shape (``timing.sequence_bytes``)."""
    return n * sequence_bytes(W - B + 1 if FULL else W, B, HQ, HKV, D)  # full: the ctx + B keys


def rel_err(a, ref):
    return ((a.float() - ref.float()).norm() / ref.float().norm()).item()


def main():
    global D, PAGE, PAGE_ORDER, FA4_PAGE, W, HQ, HKV, B, FULL
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--variants", action="store_true",
                    help="time TMA / warp-specialized kernel variants against the default config")
    ap.add_argument("--trials", default=None,
                    help="with --variants: a JSON list of Config overrides (on a TMA base) to time instead of the built-in ones")
    ap.add_argument("--only-triton", action="store_true", help="skip the baseline rows")
    ap.add_argument("--warm-l2", action="store_true",
                    help="do not flush the L2 between timings (a diagnostic; the table's method flushes). "
                         "Compare kernel-time rows only: without the flush kernel ahead of it, a replay's "
                         "time includes the host's launch of it (H200: 11 us launch floor instead of 4.7)")
    ap.add_argument("--layout", default="nhd",
                    help="K/V storage, a comma list of: [pages, P, Hkv, D] (nhd), [pages, Hkv, P, D] (hnd), "
                         "TensorRT-LLM's paged DFlash pool [pages, 2, Hkv, P, D] (trtllm), its VANILLA dense arena "
                         "[slots, L, ctx + B, Hkv, D] (arena)")
    ap.add_argument("--tp", default=None,
                    help="a comma list of tensor-parallel sizes: each rank's heads as TensorRT-LLM shards them "
                         "(Hq // tp query, ceil(Hkv / tp) KV heads)")
    ap.add_argument("--heads", type=int, default=None, help="query heads (one shape; default the MiniMax 64)")
    ap.add_argument("--kv-heads", type=int, default=None, help="KV heads (one shape; default the MiniMax 4)")
    ap.add_argument("--page", type=int, default=PAGE, help="tokens per page of the ring cache (FA4 keeps 128)")
    ap.add_argument("--log", default=None, help="write all numbers here as JSON lines")
    ap.add_argument("--head-dim", type=int, default=D, help="head dimension (MiniMax: 128)")
    ap.add_argument("--window", type=int, default=W,
                    help="two-sided window W (MiniMax: 4096); logs at two or more windows give bench/wave_fit.py "
                         "each kernel's streaming rate and fixed cost a wave")
    ap.add_argument("--no-fa4", action="store_true", help="skip the FlashAttention-4 row")
    ap.add_argument("--block", type=int, default=None, help="block slots B (MiniMax: 7)")
    ap.add_argument("--full", action="store_true", help="full (non-causal) attention over the whole context")
    ap.add_argument("--kind", default=None, choices=sorted(KINDS),
                    help="a drafter kind's shape (KINDS: heads, KV heads, head dim, block, window, context)")
    ap.add_argument("--page-order", choices=PAGE_ORDERS, default=PAGE_ORDER,
                    help="pages of a sequence scattered over the pool (a permutation) or in pool order, or one set of "
                         "context pages for every sequence (K/V in L2: bound by instructions, not memory); applies "
                         "to the ring cache and to FA4's pages alike")
    ap.add_argument("--tiny", action="store_true",
                    help="timing.TINY's shape (a few heads and keys) and a short context: a smoke run, also on CPU "
                         "(TRITON_INTERPRET=1; the flex and FA4 rows are skipped there)")
    ap.add_argument("--fa4-page", type=int, default=FA4_PAGE,
                    help="FA4's page size (128: its TMA path; 32: the page size of TensorRT-LLM's DFlash arena)")
    args = ap.parse_args()
    if args.tiny:
        HQ, HKV, B = TINY.hq, TINY.hkv, TINY.b
        args.head_dim, args.page, args.window, args.ctx = TINY.d, TINY.page, TINY.w, TINY.ctx
    if args.kind:
        hq, hkv, d, b, w, ctx, _ = KINDS[args.kind]
        HQ, HKV, B, args.head_dim, args.ctx = hq, hkv, b, d, ctx
        args.full, args.window = w is None, w or args.window
    HQ, HKV = args.heads or HQ, args.kv_heads or HKV
    B = args.block or B
    layouts = args.layout.split(",")
    bad = [x for x in layouts if x not in LAYOUTS]
    if bad or (args.tp and (args.heads or args.kv_heads)):
        ap.error(f"--layout: a comma list of {', '.join(LAYOUTS)} (got {bad})" if bad
                 else "--tp derives the heads: give --tp or --heads/--kv-heads, not both")
    shapes = [(1, HQ, HKV)] if not args.tp else [(tp, HQ // tp, -(-HKV // tp)) for tp in map(int, args.tp.split(","))]
    if any(hq < 1 or hq % hkv for _, hq, hkv in shapes):
        ap.error(f"heads per rank must be a multiple of KV heads per rank: {shapes}")
    if DEV.type != "cuda":
        args.no_flex = args.no_fa4 = True
    PAGE_ORDER = args.page_order
    FA4_PAGE = args.fa4_page
    timing.WARM_L2 = args.warm_l2
    D = args.head_dim
    PAGE = args.page
    FULL = args.full
    W = args.ctx + B if FULL else args.window  # full attention: a window that reaches every key
    mask = MaskSpec(causal=False, window=None if FULL else W)
    scale = D ** -0.5
    log = open(args.log, "w") if args.log else None

    def emit(rec):
        if log:
            log.write(json.dumps(rec) + "\n")
            log.flush()
        print(json.dumps(rec), flush=True)

    gpu = torch.cuda.get_device_name() if DEV.type == "cuda" else "cpu"
    copy_tbs = copy_bandwidth()
    emit(dict(read_ceiling.ceilings(bench_graph, tiny=args.tiny), what=read_ceiling.WHAT))
    one = torch.zeros(1, device=DEV)
    launch_us = bench_graph(lambda: one.add_(1.0)) * 1e3  # the timing method's floor: one tiny kernel
    emit({"launch_floor_us": launch_us, "what": "CUDA-graph replay of one 1-element kernel, L2 flushed"})
    emit({"gpu": gpu, "sms": sm_count(DEV), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "copy_TBps": copy_tbs,
          "page_layout": args.layout, "tp_heads": shapes, "l2": "warm (not flushed)" if timing.WARM_L2 else "flushed before each timing",
          "torch": torch.__version__, "triton": __import__("triton").__version__,
          "kind": args.kind, "full": FULL,
          "shape": {"Hq": HQ, "Hkv": HKV, "D": D, "B": B, "W": None if FULL else W, "ctx": args.ctx, "page": PAGE, "layout": args.layout,
                    "page_order": PAGE_ORDER, "fa4_page": FA4_PAGE},
          "fa4": _fa4_version() if fa4_varlen_func is not None else f"not importable: {FA4_MISSING}"})
    batches = [int(x) for x in args.batches.split(",")]
    for tp, hq, hkv in shapes:
        for layout in layouts:
            HQ, HKV = hq, hkv
            emit({"config": {"tp": tp, "Hq": HQ, "Hkv": HKV, "layout": layout}})
            table = run_shape(args, layout, batches, mask, scale, emit, copy_tbs, tag=dict(tp=tp, Hq=HQ, Hkv=HKV,
                                                                                      layout=layout))
            print(f"\n{args.kind or ''} TP {tp}: Hq {HQ}, Hkv {HKV}, D {D}, B {B}, "
                  f"{'full attention' if FULL else f'W {W}'}, ctx {args.ctx}; K/V: {layout}"
                  + ("" if layout == "arena" else f", pages of {PAGE}"))
            print_table(table, copy_tbs, gpu, batches)
    print(f"launch floor (graph replay of one 1-element kernel, same timing): {launch_us:.1f} us; "
          f"L2 {'WARM (not flushed: a diagnostic)' if timing.WARM_L2 else 'flushed'}")


def run_shape(args, layout, batches, mask, scale, emit, copy_tbs, tag):
    """Every row at every batch at the current shape (the module's globals) and ``layout``;
    returns the table ``{(row, batch): (us, TB/s, fraction of copy, timing)}``. ``tag`` goes into
    every record."""
    table = {}
    out_emit = emit
    emit = lambda rec: out_emit(dict(rec, **tag))  # noqa: E731
    for n in batches:
        q, cache, kb, vb = make_inputs(n, args.ctx, seed=n, layout=layout, order=PAGE_ORDER)
        dense = Dense(q, cache, kb, vb, args.ctx)
        ref = dense.pregathered()
        rows = {
            "triton_window_block": lambda: triton_window_block(q, cache, kb, vb, mask, scale),
            "sdpa_dense_mask (gather+sdpa, enable_gqa)": dense.plain_gqa,
            "sdpa_dense_mask (gather+sdpa, GQA packed)": dense.end_to_end,
            "sdpa_dense_mask (pre-gathered K/V)": dense.pregathered,
        }
        if fa4_varlen_func is not None and not args.no_fa4:
            try:
                rows[f"FlashAttention-4 (paged, P {FA4_PAGE}, {'no window' if FULL else 'window (W-1, W-1)'}, pack_gqa)"] = make_fa4(dense, q)
            except Exception as e:  # noqa: BLE001
                emit({"batch": n, "method": "FlashAttention-4", "error": repr(e)[:300]})
        if window_decode_merge is not None:
            rows["window_decode_merge"] = lambda: window_decode_merge(q, cache, kb, vb, mask, scale)
        if not args.no_flex:
            try:
                rows["flex_attention (pre-gathered K/V)"] = make_flex(dense)
            except Exception as e:  # noqa: BLE001
                emit({"batch": n, "method": "flex_attention", "error": repr(e)[:300]})
        if args.only_triton:
            rows = {k: v for k, v in rows.items() if k == "triton_window_block" or k.startswith("FlashAttention-4")}
        for name, fn in rows.items():
            try:
                out = fn()
                err = rel_err(out, ref)
                oerr = oracle_error(out, dense)
                ms, how = timed(fn)
            except Exception as e:  # noqa: BLE001
                emit({"batch": n, "method": name, "error": repr(e)[:300]})
                continue
            tbs = needed_bytes(n) / (ms * 1e-3) / 1e12
            table[(name, n)] = (ms * 1e3, tbs, tbs / copy_tbs, how)
            emit({"batch": n, "method": name, "us": ms * 1e3, "TBps": tbs, "frac_copy": tbs / copy_tbs,
                  "rel_err_vs_sdpa": err, "rel_err_vs_float64_oracle": oerr, "timing": how})
            kus = kernel_us(fn) if name == "triton_window_block" else 0.0
            if kus > 0:  # 0 when another profiler (ncu) holds CUPTI
                ktbs = needed_bytes(n) / (kus * 1e-6) / 1e12
                table[("triton_window_block (kernel time)", n)] = (kus, ktbs, ktbs / copy_tbs, "kernel")
                emit({"batch": n, "method": name, "kernel_us": kus, "TBps": ktbs, "frac_copy": ktbs / copy_tbs,
                      "timing": "profiler: device time of its kernels, L2 flushed"})
        cfg = choose_config(n, B, HQ, HKV, D, W - 1, q.device, tma_ok=tma_fits(q, cache),
                            gluon_ok=gluon_window_block.fits(q, cache, kb, vb))
        emit({"batch": n, "default_config": cfg.__dict__})
        if args.sweep:
            sweep(n, q, cache, kb, vb, mask, scale, ref, cfg, emit)
        if args.variants:
            variants(n, q, cache, kb, vb, mask, scale, ref, cfg, emit, json.loads(args.trials) if args.trials else None)
        del q, cache, kb, vb, dense, ref
        if DEV.type == "cuda":
            torch.cuda.empty_cache()
    return table


def _fa4_version():
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("flash-attn-4")
    except PackageNotFoundError:
        return "importable (version unknown)"


def sweep(n, q, cache, kb, vb, mask, scale, ref, cfg, emit):
    """Tile variants at the default split count, then split counts at the best tile."""
    best = (float("inf"), cfg)
    tiles = [(bm, bn, nw, ns) for bm in (64, 128) for bn in (64, 128) for nw in (4, 8) for ns in (3, 4)]
    for bm, bn, nw, ns in tiles:
        c = Config(bm, bn, cfg.num_splits if bm == cfg.block_m else max(1, cfg.num_splits // 2), nw, ns)
        best = min(best, _time_variant(n, c, q, cache, kb, vb, mask, scale, ref, emit), key=lambda x: x[0])
    base = best[1]
    splits = {1: (8, 16, 24, 32, 48, 64), 16: (1, 2, 3, 4, 6, 8)}.get(n, (1, 2))
    for s in splits:
        c = Config(base.block_m, base.block_n, s, base.num_warps, base.num_stages)
        best = min(best, _time_variant(n, c, q, cache, kb, vb, mask, scale, ref, emit), key=lambda x: x[0])
    emit({"batch": n, "best": best[1].__dict__, "best_us": best[0]})


def variants(n, q, cache, kb, vb, mask, scale, ref, cfg, emit, custom=None):
    """The default config against TMA tile variants (block_n <= page) and split counts, or
    against ``custom`` (a list of Config overrides on the TMA base)."""
    base = dict(cfg.__dict__, block_n=PAGE, tma=True)
    trials = [dict(cfg.__dict__)]
    if custom is not None:
        trials += [dict(base, **t) for t in custom]
    else:
        trials += [dict(base, block_n=32, num_stages=ns) for ns in (3, 4, 5, 6)]  # 3-4 programs per SM fit
        trials += [dict(base, block_m=bm, num_warps=nw, num_stages=ns)
                   for bm, nw in ((64, 4), (128, 8), (128, 4)) for ns in (4, 5, 6)] if n < 64 else []
        if n <= 16:
            trials += [dict(base, num_splits=s) for s in ((8, 12, 16) if n == 1 else (1, 2, 3))]
    best = (float("inf"), cfg)
    for t in trials:
        best = min(best, _time_variant(n, Config(**t), q, cache, kb, vb, mask, scale, ref, emit), key=lambda x: x[0])
    emit({"batch": n, "best": best[1].__dict__, "best_us": best[0]})
    for c in (cfg, best[1]):
        per = kernel_us(lambda: triton_window_block(q, cache, kb, vb, mask, scale, config=c), per_kernel=True)
        emit({"batch": n, "config": c.__dict__, "kernel_us": {k[:60]: round(v, 2) for k, v in per.items()}})


def _time_variant(n, c, q, cache, kb, vb, mask, scale, ref, emit):
    fn = lambda: triton_window_block(q, cache, kb, vb, mask, scale, config=c)  # noqa: E731
    try:
        err = rel_err(fn(), ref)
        us = bench_graph(fn, reps=30) * 1e3
    except Exception as e:  # noqa: BLE001
        emit({"batch": n, "variant": c.__dict__, "error": repr(e)[:300]})
        return (float("inf"), c)
    tbs = needed_bytes(n) / (us * 1e-6) / 1e12
    emit({"batch": n, "variant": c.__dict__, "us": us, "TBps": tbs, "rel_err": err})
    return (us if err < 2e-2 else float("inf"), c)


def print_table(table, copy_tbs, gpu, batches):
    names = list(dict.fromkeys(k[0] for k in table))
    print(f"\n{gpu}; copy {copy_tbs:.2f} TB/s (read+write); cells: time us / TB/s / fraction of copy")
    print("| method | " + " | ".join(f"batch {n}" for n in batches) + " |")
    print("|---|" + "---|" * len(batches))
    for name in names:
        cells = []
        for n in batches:
            if (name, n) in table:
                us, tbs, frac, how = table[(name, n)]
                cells.append(f"{us:.1f} us / {tbs:.2f} / {frac:.0%}" + ("" if how in ("graph", "kernel") else " (no graph)"))
            else:
                cells.append("n/a")
        print(f"| {name} | " + " | ".join(cells) + " |")
    sd = "sdpa_dense_mask (pre-gathered K/V)"
    fa4 = next((k for k in names if k.startswith("FlashAttention-4")), None)
    for n in batches:
        if fa4 and ("triton_window_block", n) in table and (fa4, n) in table:
            ratio = table[(fa4, n)][0] / table[("triton_window_block", n)][0]
            print(f"batch {n}: triton_window_block {table[('triton_window_block', n)][0]:.1f} us vs FlashAttention-4 "
                  f"{table[(fa4, n)][0]:.1f} us: {'FASTER' if ratio > 1 else 'slower'} ({ratio:.2f}x)")
    for n in batches:
        if ("triton_window_block", n) in table and (sd, n) in table:
            print(f"batch {n}: triton_window_block is {table[(sd, n)][0] / table[('triton_window_block', n)][0]:.1f}x "
                  f"faster than SDPA dense mask (pre-gathered)")


if __name__ == "__main__":
    main()
