"""``triton_window_block``: one Triton kernel for a drafter layer's block attention.

Contract: :mod:`draftsmith.lowering.base` (``fn(q, cache, k_blk, v_blk, mask, scale,
return_lse=False)``); the mask is section 2 of the drafter reference, exactly.

How it computes it:

- One program owns one (sequence ``n``, KV head, row block, KV split). Its rows are all
  ``B * G`` (block query ``j``, query head of this KV head) pairs, ``G = Hq // Hkv``, packed
  into one tile of ``BLOCK_M`` rows (``7 * 16 = 112`` pads to 128), so every K/V tile of the
  context is read once per KV head, not once per query head.
- Context keys are read from the paged ring cache through the block table: token ``t`` at
  page ``block_table[n, (t // P) % R]``, slot ``t % P``. Only keys the mask can reach are
  read: ``max(0, C - (W - 1)) .. C - 1`` for a window ``W`` (the lowest window bound over the
  block's queries; never a recycled ring slot), ``0 .. C - 1`` for full attention. The
  block's own keys come from ``k_blk``/``v_blk`` and are masked per (query, key) pair.
- Online softmax in float32 with base-2 exponentials (scores pre-multiplied by
  ``scale * log2(e)``). LSE is returned in natural log.
- Split-KV: the context range of each sequence is cut into ``S`` equal chunks (``S`` picked
  from static shapes only: batch, KV heads, row blocks, the largest key span the mask and
  the block table allow, and the multiprocessor count), each program writes a normalised
  float32 partial and its LSE, and a second kernel merges them. With ``S == 1`` the first
  kernel writes the output directly.
- On SM90 (triton 3.6), where the shape allows (every per-rank shape of the MiniMax drafter
  at TP 1-8, on 32-token pages and on the dense arena), the kernel is :mod:`.gluon_window_block`'s
  warp-specialized one instead (a TMA producer warp and two softmax/MMA consumer
  warpgroups; same contract and splits, same merge): on an H200 at the MiniMax shape 3-5%
  less time than the Triton kernel at batch 1 and 16, 8-13% at batch 64-256 (80-86% of
  copy bandwidth there).
- Pools it reads in place: TensorRT-LLM's paged HND pools (TRTLLM, FA4, XQA backends:
  ``ctx_kv_cache[layer][:, 0/1].transpose(1, 2)``, pages of any size) and the VANILLA dense
  arena (``ctx_k_cache[:, layer]``, one page of any length ``max_ctx + block`` per slot).
- CUDA-graph capturable: no host syncs (``ctx_lens`` is only read on the device), the grid
  and ``S`` come from tensor shapes and the device's multiprocessor count; after the first call
  of a shape it allocates only its outputs (the split partials: :func:`.split_merge.split_scratch`).

On a CPU tensor it runs only through Triton's interpreter: ``TRITON_INTERPRET=1`` must be
set before triton is first imported (triton decorates its own library then; this is
checked). This module's kernels are decorated lazily, once per mode.
"""

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import torch

from . import gluon_window_block
from .base import MaskSpec, PagedKV
from .jit import check_interpreter, interpret_on, jitted, next_pow2, sm_count
from .page_layout import page_layout, tma_rows
from .split_merge import merge_splits, split_scratch

try:  # Triton is optional: the lowering registers either way and reports itself unavailable.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = SimpleNamespace(constexpr="constexpr")  # lets the kernel signatures below parse

LOG2E = 1.4426950408889634


def available() -> bool:
    """Triton importable and either CUDA present or the interpreter switched on."""
    if triton is None:
        return False
    return torch.cuda.is_available() or interpret_on()


# --------------------------------------------------------------------------------------
# Kernels (plain Python functions; decorated with triton.jit lazily, per interpreter mode)
# --------------------------------------------------------------------------------------


def _attn_kernel(
    q_ptr, kp_ptr, vp_ptr, k_desc, v_desc, bt_ptr, ctx_ptr, kb_ptr, vb_ptr,
    out_ptr, lse_ptr, po_ptr, plse_ptr,
    s_qn, s_qb, s_qh,
    s_kpp, s_kpt, s_kph,
    s_vpp, s_vpt, s_vph,
    s_btn,
    s_kbn, s_kbb, s_kbh,
    s_vbn, s_vbb, s_vbh,
    s_on, s_ob, s_oh,
    B, G, HQ, HKV, D, R, W_M1, qk_scale, NUM_SPLITS, NUM_RB, TMA_PAGE, TMA_HEAD, TMA_COL,
    PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_B: tl.constexpr,
    D_PAD: tl.constexpr, CAUSAL: tl.constexpr, WINDOWED: tl.constexpr,
    SPLIT: tl.constexpr, RETURN_LSE: tl.constexpr, F32_DOT: tl.constexpr, EVEN_D: tl.constexpr,
    TMA: tl.constexpr, WS: tl.constexpr,
):
    """One (sequence, KV head, row block, split) program. Scores are in log2 units.

    ``TMA``: interior tiles are loaded through the 2-D tensor descriptors ``k_desc``/``v_desc``
    (box ``[BLOCK_N, D]``; needs ``BLOCK_N <= P`` and ``D`` a power of 2): key ``slot`` of page
    ``pg``, head ``h`` is row ``pg * TMA_PAGE + h * TMA_HEAD + slot``, column ``h * TMA_COL`` (see
    :func:`_descriptors`); otherwise, and always for edge tiles, by gathered pointer loads.
    ``WS``: ask Triton to warp-specialize the key loop (no effect measured on an H200).
    """
    pid = tl.program_id(0)
    split = tl.program_id(1)
    rb = pid % NUM_RB
    kvh = (pid // NUM_RB) % HKV
    n = pid // (NUM_RB * HKV)
    n64 = n.to(tl.int64)

    ctx = tl.load(ctx_ptr + n)

    rows = rb * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < B * G
    j = rows // G
    head = kvh * G + rows % G
    dim = tl.arange(0, D_PAD)
    dim_ok = dim < D

    q_off = n64 * s_qn + j.to(tl.int64)[:, None] * s_qb + head.to(tl.int64)[:, None] * s_qh + dim[None, :]
    q = tl.load(q_ptr + q_off, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)

    # Context keys this sequence's block can reach, cut into NUM_SPLITS chunks.
    if WINDOWED:
        start = tl.maximum(ctx - W_M1, 0)
        lo_bound = ctx + j - W_M1  # per row: lowest key position allowed
    else:
        start = ctx * 0
        lo_bound = j * 0
    # Tiles start on multiples of BLOCK_N (so, with BLOCK_N <= P, inside one page); keys
    # of the first tile below ``start`` are masked and never loaded.
    start_al = (start // BLOCK_N) * BLOCK_N
    span = ctx - start_al
    chunk = tl.cdiv(tl.cdiv(span, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = start_al + split * chunk
    hi = tl.minimum(ctx, lo + chunk)

    bt_row = bt_ptr + n64 * s_btn
    kv_h_k = kvh.to(tl.int64) * s_kph
    kv_h_v = kvh.to(tl.int64) * s_vph
    # Three phases of tiles: 0 = leading tiles a window's lower edge can cut (masked),
    # 1 = interior tiles (no mask, unpredicated loads), 2 = the trailing partial tile.
    n_keys = tl.maximum(hi - lo, 0)
    n_tiles = tl.cdiv(n_keys, BLOCK_N)
    n_full = n_keys // BLOCK_N
    if WINDOWED:
        n_pre = tl.minimum(tl.maximum(tl.cdiv(ctx + B - 1 - W_M1 - lo, BLOCK_N), 0), n_tiles)
    else:
        n_pre = n_tiles * 0
    mid_end = tl.maximum(n_pre, n_full)
    for phase in tl.static_range(3):
        if phase == 0:
            first = n_pre * 0
            last = n_pre
        elif phase == 1:
            first = n_pre
            last = mid_end
        else:
            first = mid_end
            last = n_tiles
        for i in tl.range(first, last, warp_specialize=WS):
            t0 = lo + i * BLOCK_N
            t = t0 + tl.arange(0, BLOCK_N)
            if phase == 1 and TMA:  # one page holds the whole tile: two descriptor loads
                row0 = tl.load(bt_row + (t0 // PAGE) % R) * TMA_PAGE + kvh * TMA_HEAD + t0 % PAGE
                k = k_desc.load([row0, kvh * TMA_COL])
                v = v_desc.load([row0, kvh * TMA_COL])
            else:  # gathered: each key's page from the block table
                if phase == 1:
                    page = tl.load(bt_row + (t // PAGE) % R).to(tl.int64)
                else:
                    t_ok = (t >= start) & (t < hi)
                    page = tl.load(bt_row + (t // PAGE) % R, mask=t_ok, other=0).to(tl.int64)
                slot = (t % PAGE).to(tl.int64)
                k_ptrs = kp_ptr + (page * s_kpp + slot * s_kpt + kv_h_k)[:, None] + dim[None, :]
                v_ptrs = vp_ptr + (page * s_vpp + slot * s_vpt + kv_h_v)[:, None] + dim[None, :]
                if phase == 1 and EVEN_D:
                    k = tl.load(k_ptrs)
                    v = tl.load(v_ptrs)
                elif phase == 1:
                    k = tl.load(k_ptrs, mask=dim_ok[None, :], other=0.0)
                    v = tl.load(v_ptrs, mask=dim_ok[None, :], other=0.0)
                else:
                    ld_mask = t_ok[:, None] & dim_ok[None, :]
                    k = tl.load(k_ptrs, mask=ld_mask, other=0.0)
                    v = tl.load(v_ptrs, mask=ld_mask, other=0.0)
            if F32_DOT:
                qk = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
            else:
                qk = tl.dot(q, tl.trans(k))
            qk = qk * qk_scale
            if phase != 1:
                allowed = t_ok[None, :]
                if WINDOWED:
                    allowed = allowed & (t[None, :] >= lo_bound[:, None])
                qk = tl.where(allowed, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.math.exp2(m_i - m_new)
            acc = acc * alpha[:, None]
            p = tl.math.exp2(qk - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
            if F32_DOT:
                acc = tl.dot(p, v.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(p.to(v.dtype), v, acc)

    # The block's own keys, once per sequence: the last split takes them.
    if split == NUM_SPLITS - 1:
        jb = tl.arange(0, BLOCK_B)
        jb_ok = jb < B
        ldb = jb_ok[:, None] & dim_ok[None, :]
        kb_off = n64 * s_kbn + jb.to(tl.int64)[:, None] * s_kbb + kvh.to(tl.int64) * s_kbh + dim[None, :]
        vb_off = n64 * s_vbn + jb.to(tl.int64)[:, None] * s_vbb + kvh.to(tl.int64) * s_vbh + dim[None, :]
        kb = tl.load(kb_ptr + kb_off, mask=ldb, other=0.0)
        vb = tl.load(vb_ptr + vb_off, mask=ldb, other=0.0)
        if F32_DOT:
            qk = tl.dot(q.to(tl.float32), tl.trans(kb.to(tl.float32)), input_precision="ieee")
        else:
            qk = tl.dot(q, tl.trans(kb))
        qk = qk * qk_scale
        allowed = jb_ok[None, :] & row_ok[:, None]
        if CAUSAL:
            allowed = allowed & (jb[None, :] <= j[:, None])
        if WINDOWED:
            diff = j[:, None] - jb[None, :]
            allowed = allowed & (diff <= W_M1) & (diff >= -W_M1)
        qk = tl.where(allowed, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if F32_DOT:
            acc = tl.dot(p, vb.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(p.to(vb.dtype), vb, acc)
        m_i = m_new

    has = l_i > 0.0
    l_safe = tl.where(has, l_i, 1.0)
    o = acc / l_safe[:, None]
    lse2 = tl.where(has, m_i + tl.math.log2(l_safe), float("-inf"))
    st_mask = row_ok[:, None] & dim_ok[None, :]
    if SPLIT:
        # Partials: po [N, B, HQ, S, D_PAD] float32, plse [N, B, HQ, S] (log2 units).
        prow = (n64 * B + j.to(tl.int64)) * HQ + head.to(tl.int64)
        po_off = (prow * NUM_SPLITS + split)[:, None] * D_PAD + dim[None, :]
        tl.store(po_ptr + po_off, o, mask=st_mask)
        tl.store(plse_ptr + prow * NUM_SPLITS + split, lse2, mask=row_ok)
    else:
        o_off = n64 * s_on + j.to(tl.int64)[:, None] * s_ob + head.to(tl.int64)[:, None] * s_oh + dim[None, :]
        tl.store(out_ptr + o_off, o.to(out_ptr.dtype.element_ty), mask=st_mask)
        if RETURN_LSE:
            lrow = (n64 * B + j.to(tl.int64)) * HQ + head.to(tl.int64)
            tl.store(lse_ptr + lrow, lse2 * 0.6931471805599453, mask=row_ok)


def _kernels():
    """(attention kernel,), decorated for the current interpreter mode."""
    return jitted(_attn_kernel)


# --------------------------------------------------------------------------------------
# Launch configuration (static shapes only)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """Tile sizes and launch shape. ``num_splits`` is the split-KV count ``S``."""

    block_m: int
    block_n: int  # keys a tile
    num_splits: int
    num_warps: int
    num_stages: int  # software-pipeline stages; the Gluon kernel: its TMA ring slots
    tma: bool = False  # interior tiles through tensor descriptors (needs block_n <= P, D a power of 2)
    warp_specialize: bool = False  # Triton's warp specialization of the key loop
    gluon: bool = False  # the warp-specialized Gluon kernel instead (SM90; :mod:`.gluon_window_block`)


# The tuned choices of :func:`choose_config`, one row each: (value, the rule it follows, where it
# was measured: an H200 at the MiniMax shape). The Gluon kernel's own are its ``TUNED``.
TUNED = {
    "gluon_min_keys": (256, "fewest context keys a split of the Gluon kernel (four 64-key tiles; two measured no "
                            "faster); splits only while N * Hkv programs leave multiprocessors idle (one wave)",
                       "lab/log.md#a06"),
    "tma_tiles": ((64, 64, 4, 5), "rows, keys, warps, stages of TMA tiles at head dims <= 128: two programs a "
                                  "multiprocessor fit in shared memory", "lab/log.md#a02"),
    "tma_tiles_d256": ((32, 3), "keys, stages of TMA tiles at head dim 256: 1.9x the gathered 64 x 64 tiles",
                       "lab/log.md#a09"),
    "tma_stages_4byte": (2, "stages of TMA tiles of 4-byte elements (float32): what fits the shared memory (five "
                            "stages of 64-key float32 tiles need 328 KB); chosen to fit, not timed", "lab/log.md#a02"),
    "tma_min_keys": (320, "fewest context keys a split of the TMA tiles", "lab/log.md#a02"),
    "gathered_min_keys": (160, "fewest context keys a split of gathered tiles; about two programs a "
                               "multiprocessor, at most 64 splits", "lab/log.md#a01 (sweeps: lab/NOTES-attention.md)"),
    "gathered_rows_small_batch": (64, "rows a program of gathered tiles when 128-row programs would leave "
                                      "multiprocessors idle", "lab/log.md#a01 (sweeps: lab/NOTES-attention.md)"),
}
GLUON_MIN_KEYS = TUNED["gluon_min_keys"][0]


def choose_config(
    n: int, b: int, hq: int, hkv: int, d: int, max_span: int, device: torch.device,
    num_splits: Optional[int] = None, block_n: Optional[int] = None, block_m: Optional[int] = None,
    num_warps: Optional[int] = None, num_stages: Optional[int] = None, tma_ok: bool = False,
    gluon_ok: bool = False, elt_bytes: int = 2,
) -> Config:
    """Pick tiles and the split count from static shapes.

    ``max_span``: the most context keys one sequence can need (``W - 1`` for a window,
    ``R * P`` for full attention), a static bound; ``ctx_lens`` itself is never read here.
    ``tma_ok``: the caller has checked that tensor-descriptor tiles fit (see
    :func:`tma_fits`); then tiles are 64 rows x 64 keys, 4 warps, 5 stages, interior tiles
    through TMA (head dim 256: 32 keys, 3 stages, which fit the shared memory; ``elt_bytes`` 4,
    float32: 2 stages). Otherwise rows: one tile of ``B * G`` rows (at most 128; 64 for ``D > 128``);
    64 when a batch is too small to give every multiprocessor a program. Splits: about two
    programs per multiprocessor, at most 64, none shorter than 160 keys (320 with TMA).
    ``gluon_ok``: the caller has checked :func:`.gluon_window_block.fits`; then the
    warp-specialized Gluon kernel runs instead, one program per (sequence, KV head) and
    split, with splits only while ``n * hkv`` programs leave multiprocessors idle (a
    program fills one).
    Tuned on an H200 at the MiniMax shape: :data:`TUNED` (each row cites its lab/log.md entry).
    """
    d_pad = max(16, next_pow2(d))
    rows = b * (hq // hkv)
    sms = sm_count(device)
    if gluon_ok:
        if num_splits is None:  # at most one program per multiprocessor (one fits), >= GLUON_MIN_KEYS keys each
            ctas = n * hkv
            num_splits = max(1, min(max_span // GLUON_MIN_KEYS, sms // ctas))  # one wave
        bn, _, slots = gluon_window_block.tiles_for(d)  # what its launch builds: keys a tile, ring slots
        return Config(64, bn, num_splits, 4, slots, tma=True, gluon=True)
    if tma_ok:
        tm, tn, tw, ts = TUNED["tma_tiles"][0]
        tn256, ts256 = TUNED["tma_tiles_d256"][0]
        block_m = block_m or min(tm, max(16, next_pow2(rows)))
        block_n = block_n or (tn256 if d_pad >= 256 else tn)
        num_warps = num_warps or tw
        num_stages = num_stages or (ts256 if d_pad >= 256 else ts)
        if elt_bytes > 2:
            num_stages = min(num_stages, TUNED["tma_stages_4byte"][0])
    if block_m is None:
        block_m = min(max(16, next_pow2(rows)), 64 if d_pad >= 256 else 128)
        if block_m == 128 and n * hkv * -(-rows // 128) < sms:
            block_m = TUNED["gathered_rows_small_batch"][0]  # small batch: more, lighter programs
    if block_n is None:
        block_n = 64 if (d_pad >= 256 or block_m < 128) else 128
    num_rb = -(-rows // block_m)
    ctas = n * hkv * num_rb
    if num_splits is None:
        min_keys = (TUNED["tma_min_keys" if tma_ok else "gathered_min_keys"][0] if device.type == "cuda"
                    else block_n)
        max_splits = max(1, min(64, max_span // min_keys))
        num_splits = 1 if ctas >= sms else min(max_splits, max(1, (2 * sms) // ctas))
    if num_warps is None:
        num_warps = 8 if block_m * d_pad >= 128 * 128 else 4
    if num_stages is None:
        num_stages = 2 if d_pad >= 256 else 3
    return Config(block_m, block_n, max(1, num_splits), num_warps, num_stages, tma=tma_ok)


def tma_fits(q: torch.Tensor, cache: PagedKV) -> bool:
    """Tensor-descriptor (TMA) tiles apply: a Hopper-or-newer GPU, a power-of-2
    head dim of at most 256 (a TMA box row), pages of at least 64 tokens that no 64- or 32-key
    tile crosses (a multiple of 64 tokens, or one page per sequence: the VANILLA dense arena,
    where every tile lies in the sequence's only page), K and V pages both in one
    :func:`page_layout`."""
    kp, vp = cache.k_pages, cache.v_pages
    d = q.shape[-1]
    page = kp.shape[1]
    layout = page_layout(kp)
    return (q.is_cuda and torch.cuda.get_device_capability(q.device)[0] >= 9 and d == next_pow2(d)
            and 16 <= d <= 256 and page >= 64 and (page % 64 == 0 or cache.ring_pages == 1)
            and layout is not None and layout == page_layout(vp))


# --------------------------------------------------------------------------------------
# The lowering
# --------------------------------------------------------------------------------------


def _check(q, cache: PagedKV, k_blk, v_blk, mask: MaskSpec):
    if q.dim() != 4 or k_blk.dim() != 4 or v_blk.dim() != 4:
        raise ValueError("q, k_blk, v_blk must be [N, B, H, D]")
    n, b, hq, d = q.shape
    hkv = k_blk.shape[2]
    if k_blk.shape != (n, b, hkv, d) or v_blk.shape != (n, b, hkv, d):
        raise ValueError(f"k_blk/v_blk must be [{n}, {b}, Hkv, {d}], got {tuple(k_blk.shape)}, {tuple(v_blk.shape)}")
    if hq % hkv:
        raise ValueError(f"Hq={hq} is not a multiple of Hkv={hkv}")
    kp, vp = cache.k_pages, cache.v_pages
    if kp.shape[2:] != (hkv, d) or vp.shape != kp.shape:
        raise ValueError(f"cache pages must be [pages, P, {hkv}, {d}], got {tuple(kp.shape)}, {tuple(vp.shape)}")
    if cache.block_table.shape[0] != n or cache.ctx_lens.shape != (n,):
        raise ValueError("block_table must be [N, R] and ctx_lens [N]")
    for name, t in (("q", q), ("k_blk", k_blk), ("v_blk", v_blk), ("k_pages", kp), ("v_pages", vp)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous last dim")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device}, q on {q.device}")
    if q.device.type != "cuda":
        check_interpreter()


def _descriptors(kp, vp, cfg: Config, d: int, d_pad: int, one_page: bool = False):
    """``(k_desc, v_desc, (TMA_PAGE, TMA_HEAD, TMA_COL))``: 2-D tensor descriptors with box
    ``[block_n, D]`` (one tile, one page, one KV head) over :func:`tma_rows` of the pages."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    page = kp.shape[1]
    if d != d_pad or cfg.block_n > page or (page % cfg.block_n and not one_page):
        raise ValueError(f"tma tiles need a power-of-2 head dim and block_n <= page size, dividing it unless a "
                         f"sequence has one page; got D={d}, block_n={cfg.block_n}, page={page}")
    (k_rows, strides), (v_rows, v_strides) = tma_rows(kp), tma_rows(vp)
    if v_strides != strides:
        raise ValueError("tma tiles need k_pages and v_pages in the same layout")
    return (TensorDescriptor.from_tensor(k_rows, [cfg.block_n, d]),
            TensorDescriptor.from_tensor(v_rows, [cfg.block_n, d]), strides)


def triton_window_block(q, cache: PagedKV, k_blk, v_blk, mask: MaskSpec, scale: float,
                        return_lse: bool = False, config: Optional[Config] = None):
    """Block attention of section 2 over the paged context and the block's own keys.

    Shapes and units: see :mod:`draftsmith.lowering.base`. Returns ``out`` ``[N, B, Hq, D]``
    in ``q.dtype`` and, with ``return_lse``, ``lse`` ``[N, B, Hq]`` float32 (natural log of
    the softmax denominator of the scaled scores). ``config`` overrides the tile choice
    (benchmarks and tests); by default :func:`choose_config` picks it from static shapes.
    """
    if triton is None:
        raise RuntimeError("triton_window_block needs triton")
    _check(q, cache, k_blk, v_blk, mask)
    n, b, hq, d = q.shape
    hkv = k_blk.shape[2]
    g = hq // hkv
    kp, vp, bt = cache.k_pages, cache.v_pages, cache.block_table
    page, ring = kp.shape[1], bt.shape[1]
    windowed = mask.window is not None
    w_m1 = mask.reach if windowed else 0
    max_span = min(w_m1, ring * page) if windowed else ring * page
    gluon_ok = gluon_window_block.fits(q, cache, k_blk, v_blk)
    cfg = config or choose_config(n, b, hq, hkv, d, max(1, max_span), q.device,
                                  tma_ok=not gluon_ok and tma_fits(q, cache), gluon_ok=gluon_ok,
                                  elt_bytes=q.element_size())
    if cfg.gluon:
        if not gluon_ok:
            raise ValueError("the gluon kernel needs an SM90 GPU, Gluon's Hopper API, bf16/fp16, head dim 64, "
                             "128 or 256 (256: B <= 32), pages of >= 16 tokens in a TMA layout and B * G <= 128")
        return gluon_window_block.launch(q, cache, k_blk, v_blk, mask, scale, return_lse=return_lse,
                                         num_splits=cfg.num_splits)
    d_pad = max(16, next_pow2(d))
    num_rb = -(-(b * g) // cfg.block_m)
    block_b = max(16, next_pow2(b))
    split = cfg.num_splits > 1

    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((n, b, hq), dtype=torch.float32, device=q.device) if return_lse else None
    if split:
        po, plse = split_scratch(n, b, hq, cfg.num_splits, d_pad, q.device)
    else:
        po = plse = out  # unused by the kernel when SPLIT is off
    lse_arg = lse if lse is not None else out
    bt_i32 = bt if bt.dtype == torch.int32 else bt.to(torch.int32)
    ctx_i32 = cache.ctx_lens if cache.ctx_lens.dtype == torch.int32 else cache.ctx_lens.to(torch.int32)

    k_desc, v_desc, tma_strides = _descriptors(kp, vp, cfg, d, d_pad, ring == 1) if cfg.tma else (kp, vp, (0, 0, 0))
    (attn,) = _kernels()
    # float32 operands and IEEE dots for float32 inputs, and always in the interpreter, whose
    # tl.dot is wrong on bfloat16 operands (triton 3.9, seen on a bare 16x16 product).
    f32_dot = q.dtype == torch.float32 or q.device.type != "cuda"
    attn[(n * hkv * num_rb, cfg.num_splits)](
        q, kp, vp, k_desc, v_desc, bt_i32, ctx_i32, k_blk, v_blk, out, lse_arg, po, plse,
        q.stride(0), q.stride(1), q.stride(2),
        kp.stride(0), kp.stride(1), kp.stride(2),
        vp.stride(0), vp.stride(1), vp.stride(2),
        bt_i32.stride(0),
        k_blk.stride(0), k_blk.stride(1), k_blk.stride(2),
        v_blk.stride(0), v_blk.stride(1), v_blk.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        b, g, hq, hkv, d, ring, w_m1, float(scale) * LOG2E, cfg.num_splits, num_rb, *tma_strides,
        PAGE=page,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_B=block_b, D_PAD=d_pad,
        CAUSAL=bool(mask.causal), WINDOWED=windowed, SPLIT=split, RETURN_LSE=return_lse, F32_DOT=f32_dot,
        EVEN_D=(d == d_pad), TMA=cfg.tma, WS=cfg.warp_specialize,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if split:
        merge_splits(po, plse, out, lse, d)
    return (out, lse) if return_lse else out
