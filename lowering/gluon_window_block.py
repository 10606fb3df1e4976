"""Hopper fast path of ``triton_window_block``: one warp-specialized Gluon kernel.

Same contract and mask as :mod:`.triton_window_block` (it is that lowering's kernel on SM90
when :func:`fits` holds); this module only holds the kernel and its launch.

One program per (sequence, KV head, split), all ``B * G`` packed query rows (at most 128):

- a 1-warp producer partition streams the *interior* context tiles of its split (64 keys;
  32 at head dim 256, whose Q is read by wgmma from shared memory: :func:`tiles_for`;
  every key visible to every row) by TMA into a ring of ``NUM_BUF`` shared-memory slots, each
  guarded by a ``ready`` and an ``empty`` mbarrier; a tile is one TMA box of K and one of V
  when pages hold a multiple of 64 keys or a sequence has one page of any length (the VANILLA
  dense arena), else ``64 / SUB`` boxes of ``SUB`` keys each (:func:`sub_rows`: TensorRT-LLM's
  32-token pages take two), each from its own page;
- one or two 4-warp consumer partitions (rows 0-63, 64-127) each run the online softmax
  (float32, base-2; a row's reference maximum moves only when passed by more than
  ``TUNED["rescale_slack"]``, and a warp none of whose rows moved skips the rescale) with
  wgmma over every slot, then release it; so each K/V tile is read
  from memory once per KV head, and, the two taking turns at the tensor cores, one
  consumer's softmax overlaps the other's MMAs and the producer's loads (FA3's structure;
  Triton's own ``warp_specialize`` does not produce it on Hopper here);
- the tiles a mask cuts (window edge, the context's last partial tile) and, in the last
  split, the block's own keys are copied by each consumer with masked cp.async (keys
  outside the mask are zero-filled, never read, so NaN there cannot leak) into its private
  shared buffers: the block's keys from the program's start (they need no page index) and
  used before the ring's first tile lands, then the first edge tile, fetched while the
  ring runs and used after it.

Split-KV (``num_splits > 1``): split ``s`` takes an equal range of whole tiles of the keys
the mask reaches and writes a float32 partial and its log2-sum-exp, merged afterwards by
``triton_window_block.merge_splits``; ``triton_window_block`` splits only while ``N * Hkv``
programs leave multiprocessors idle (a program fills one).
Needs an SM90 GPU and triton 3.6 (Gluon's API changes between releases: triton 3.9 does
not compile this kernel, so :func:`available` gates on the version and other releases use
the Triton kernel). Never run elsewhere. Its tuned parameters are :data:`TUNED`; today's
times are in ``docs/benchmarks.md``, how they were found in ``lab/log.md``.
"""

from __future__ import annotations

import functools
import struct
from collections import namedtuple
from typing import Optional

import torch

from .page_layout import page_layout, tma_rows
from .split_merge import merge_splits, split_scratch

try:
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                                  warpgroup_mma, warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except Exception:  # noqa: BLE001 - no triton, or a triton without this Gluon API
    gluon = None

# The partitions' argument groups, built by keyword and read by field name (triton 3.6 passes a
# named tuple into jit functions and warp_specialize partitions with its field names).
Work = namedtuple("Work", "ctx_ptr total B HKV NUM_SPLITS W_M1 WINDOWED")  # the launch's items and shape
Item = namedtuple("Item", "n kvh split ctx start lo hi n_tiles n_pre mid_end has_blk")  # one work item
ProducerArgs = namedtuple("ProducerArgs", "bt_ptr k_desc v_desc k_bufs v_bufs ready empty s_btn PAGE R "
                                          "TMA_PAGE TMA_HEAD TMA_COL")
ConsumerArgs = namedtuple("ConsumerArgs", "q_ptr out_ptr lse_ptr po_ptr plse_ptr k_bufs v_bufs ready empty "
                                          "kq_bufs vq_bufs q_bufs NUM_SPLITS s_qn s_qb s_qh s_on s_ob s_oh "
                                          "B G HQ W_M1 qk_scale CAUSAL WINDOWED WANT_LSE")
PrivateArgs = namedtuple("PrivateArgs", "bt_ptr kp_ptr vp_ptr kb_ptr vb_ptr B s_btn PAGE R s_kpp s_kpt s_kph "
                                        "s_vpp s_vpt s_vph s_kbn s_kbb s_kbh s_vbn s_vbb s_vbh")  # private-tile copies

LOG2E = 1.4426950408889634
TILE = 64  # keys per tile and rows per consumer
MIN_SUB_ROWS = 16  # smallest TMA box (keys) a tile is loaded in; smaller pages run the Triton kernel

# The tuned parameters, one row each: (value, the rule it follows, the lab log entry that measured it).
TUNED = {
    "ring_slots": (4, "ring slots at head dims 64 and 128: at 128 the most 32 KB slots that fit beside the "
                      "private buffers; one rule for both (head dim 64 measured a little faster with six, "
                      "not adopted)", "lab/log.md#a16"),
    "ring_slots_d256": (3, "ring slots at head dim 256: what fits beside its private buffers", "lab/log.md#a14"),
    "consumer_regs": (232, "registers a thread of the second consumer (the first gets what is left): the split "
                          "every measured build ran with", "lab/log.md#a05"),
    "producer_regs": (24, "registers a thread of the producer warp: setmaxnreg's floor (it only issues TMA "
                          "copies; 32 was no faster)", "lab/log.md#a16"),
    "overlap": ("one split, head dim 128", "the intra-warpgroup overlap build where a program streams a whole "
                "window; head dim 64's overlap build spills", "lab/log.md#a11"),
    "pingpong": ("head dim != 256", "the consumers take turns at the tensor cores except at head dim 256, "
                 "where the turns cost more than they hide", "lab/log.md#a17"),
    "rescale_slack": (8.0, "log2 units a row's reference maximum may trail the row's maximum before it moves; "
                           "a warp none of whose rows moved skips the accumulator's rescale and the quad's "
                           "shuffles for the row maximum (P stays below 2^8)", "lab/log.md#a45"),
}
NUM_BUF = TUNED["ring_slots"][0]
CONSUMER_REGS = TUNED["consumer_regs"][0]
PRODUCER_REGS = TUNED["producer_regs"][0]


VERIFIED_TRITON = ("3.6.",)  # Gluon's API moves between releases; 3.9's does not compile this kernel


def available() -> bool:
    """Gluon's Hopper API importable, in a triton release this kernel was compiled and tested
    with (others fall back to the Triton kernel)."""
    return gluon is not None and triton.__version__.startswith(VERIFIED_TRITON)


def sub_rows(page: int, bn: int = TILE, one_page: bool = False) -> int:
    """Keys per TMA box for pages of ``page`` tokens: the largest power of two that divides both
    the page and the ``bn``-key tile, so that no box crosses a page (pages are powers of two, so
    this is ``min(page, bn)``: TensorRT-LLM's 32-token pages take two boxes of a 64-key tile).
    ``one_page``: each sequence has one page (a block table of one column: TensorRT-LLM's
    VANILLA dense arena, a page of ``max_ctx + block`` tokens, any length): every key a
    sequence can reach lies in it and a ring tile never extends past the context, so no tile
    crosses a page whatever its length: one box a tile."""
    return bn if one_page else min(bn, page & -page)


def tiles_for(d: int) -> tuple:
    """``(keys a tile, Q in shared memory, ring slots)`` at head dim ``d``. Head dim 256 takes
    32-key tiles, three slots and Q from shared memory: its accumulator alone is 128 registers a
    thread, and 64-key slots of K and V (64 KB each) would not fit beside the private buffers
    (three 32-key slots do, within the SM's 232 448 bytes of shared memory; no spills without
    the overlap build, which :func:`default_overlap` keeps to head dim 128)."""
    return (32, True, TUNED["ring_slots_d256"][0]) if d == 256 else (TILE, False, NUM_BUF)


def _build(d: int, page: int, elt, num_buf: Optional[int], one_page: bool = False):
    """What :func:`launch` builds at head dim ``d`` and pages of
    ``page`` tokens (``one_page``: one page a sequence): ``(keys a tile, Q in shared memory, ring
    slots, slot layout, keys a TMA box)`` (:func:`tiles_for`, :func:`sub_rows`; ``num_buf``
    overrides the slots)."""
    bn, q_smem, slots = tiles_for(d)
    lay = gl.NVMMASharedLayout.get_default_for([bn, d], elt)  # the ring's slots; boxes fill them in SUB-key rows
    return bn, q_smem, slots if num_buf is None else num_buf, lay, sub_rows(page, bn, one_page)


def fits(q: torch.Tensor, cache, k_blk: torch.Tensor, v_blk: torch.Tensor) -> bool:
    """The fast path applies: Gluon present, an SM90 GPU, bf16/fp16, head dim 64, 128 or 256 (with
    a block of at most 32 keys: :func:`tiles_for`), pages
    in one of the two TMA layouts whose boxes hold >= 16 keys (:func:`sub_rows`: pages of 16
    tokens or more, or one page of any length a sequence: the VANILLA dense arena, read in
    place), ``B * G <= 128``, and every K/V row of the pages and the block
    on 16 bytes (what its cp.async copies assume)."""
    if not available() or not q.is_cuda or torch.cuda.get_device_capability(q.device)[0] != 9:
        return False
    n, b, hq, d = q.shape
    hkv = k_blk.shape[2]
    kp, vp = cache.k_pages, cache.v_pages
    layout = page_layout(kp)
    bn = tiles_for(d)[0]
    return (q.dtype in (torch.bfloat16, torch.float16) and kp.dtype == q.dtype and d in (64, 128, 256)
            and sub_rows(kp.shape[1], bn, cache.block_table.shape[1] == 1) >= MIN_SUB_ROWS and b * (hq // hkv) <= 2 * TILE and b <= bn
            and layout is not None and layout == page_layout(vp) and _rows_16b_aligned(kp, vp, k_blk, v_blk))


def _rows_16b_aligned(*tensors) -> bool:
    """Every row of ``D`` elements starts on 16 bytes: 16-byte base, strides of 8 elements."""
    return all(t.data_ptr() % 16 == 0 and all(st % 8 == 0 for st in t.stride()[:-1]) for t in tensors)


def rescale_asm(n: int) -> tuple[str, str]:
    """``(PTX, constraints)`` of :func:`rescale`'s statement over ``n`` accumulator registers ($0..:
    the outputs, each tied to its input; then ``n`` inputs each of acc, alpha and the warp's flag):
    multiply in place unless the warp's flag is 0 (a warp-uniform branch: the flag is a vote)."""
    muls = "".join(f"mul.f32 ${i}, ${i}, ${2 * n + i};\n\t" for i in range(n))
    ptx = "{\n\t.reg .pred p;\n\t" + f"setp.ne.u32 p, ${3 * n}, 0;\n\t" + "@!p bra.uni SKIP;\n\t" + muls + "SKIP:\n\t}"
    return ptx, ",".join(["=f"] * n + [str(i) for i in range(n)] + ["f"] * n + ["r"] * n)


def lane_ref_ptx(slack: float) -> str:
    """PTX for :func:`lane_ref` over a thread's two rows: $0, $1 the new references, $2, $3 the
    warp's vote; $4, $5 the lane's own maxima, $6, $7 the references. Every input is read into a
    local before any output is written (outputs may share registers with inputs)."""
    sl = "0f%08X" % struct.unpack("<I", struct.pack("<f", slack))[0]  # PTX's hex float
    row = lambda i: (f"shfl.sync.bfly.b32 t, x{i}, 1, 0x1f, 0xffffffff;\n\tmax.f32 x{i}, x{i}, t;\n\t"
                     f"shfl.sync.bfly.b32 t, x{i}, 2, 0x1f, 0xffffffff;\n\tmax.f32 x{i}, x{i}, t;\n\t"
                     f"setp.gt.f32 q, x{i}, c{i};\n\tselp.f32 r{i}, x{i}, m{i}, q;\n\t")
    return ("{\n\t.reg .pred q, p;\n\t.reg .f32 x0, x1, m0, m1, c0, c1, r0, r1, t;\n\t"
            "mov.f32 x0, $4;\n\tmov.f32 x1, $5;\n\tmov.f32 m0, $6;\n\tmov.f32 m1, $7;\n\t"
            f"add.f32 c0, m0, {sl};\n\tadd.f32 c1, m1, {sl};\n\t"
            "setp.gt.f32 q, x0, c0;\n\tsetp.gt.or.f32 q, x1, c1, q;\n\t"
            "vote.sync.any.pred p, q, 0xffffffff;\n\tmov.f32 r0, m0;\n\tmov.f32 r1, m1;\n\t"
            "@!p bra.uni DONE;\n\t" + row(0) + row(1) +
            "DONE:\n\tmov.f32 $0, r0;\n\tmov.f32 $1, r1;\n\tselp.u32 $2, 1, 0, p;\n\tmov.u32 $3, $2;\n\t}")


@functools.lru_cache(maxsize=None)
def _kernel(overlap: bool = False, sub: int = TILE, pingpong: bool = False, bn: int = TILE, q_smem: bool = False):
    """The Gluon kernel, decorated on first use (never under the interpreter); :func:`launch`
    picks the build, ``lab/gluon_ab.py`` A/Bs them.

    - ``overlap``: the consumers issue the next ring tile's Q K^T before this tile's softmax,
      and run the softmax while this tile's P @ V is in flight (FA3's intra-warpgroup
      overlap); otherwise each MMA is waited for before the softmax that follows it.
    - ``pingpong``: with two consumers, they take turns issuing their MMAs (FA3's
      warp-scheduler barriers: two named hardware barriers, one per consumer), so that one
      consumer's softmax runs while the other's MMAs hold the tensor cores; otherwise both
      issue together (they start in step, on the same ``ready`` barrier).
    - ``sub``: keys per TMA box (:func:`sub_rows`), a closure constant (a shape in the
      producer partition, whose arguments arrive as values).
    - ``bn``, ``q_smem``: keys a tile, and Q as wgmma's A from shared memory instead of
      registers (:func:`tiles_for`)."""
    BN = gl.constexpr(bn)
    Q_SMEM = gl.constexpr(q_smem)
    OVERLAP = gl.constexpr(overlap)
    PINGPONG = gl.constexpr(pingpong)
    SUB = gl.constexpr(sub)
    N_SUB = gl.constexpr(bn // sub)
    BM = gl.constexpr(TILE)
    RESCALE_SLACK = gl.constexpr(TUNED["rescale_slack"][0])  # log2 units (scores_step)
    RESCALE_PACK = gl.constexpr(32)  # accumulator registers a rescale statement (:func:`rescale`; head dim 64 has 32)
    RESCALE_PTX, RESCALE_CONSTRAINTS = (gl.constexpr(a) for a in rescale_asm(RESCALE_PACK.value))
    LANE_REF_PTX = gl.constexpr(lane_ref_ptx(RESCALE_SLACK.value))

    @gluon.jit
    def ptx(asm: gl.constexpr):
        """One PTX statement with no operands (a dummy output, which inline asm needs)."""
        gl.inline_asm_elementwise(asm, "=r", [], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def turn(WG: gl.constexpr, WAIT: gl.constexpr, ON: gl.constexpr):
        """Consumer ``WG``'s turn at the tensor cores, on named barrier ``8 + WG`` (ids 0-2 are
        triton's) of 256 threads: ``WAIT`` waits for it (this consumer's 128 threads and the
        other's arrival); otherwise the other consumer gives it (arrives without waiting)."""
        if ON:
            if WAIT:
                if WG == 0:
                    ptx("bar.sync 8, 256;\n\tmov.u32 $0, 0;")
                else:
                    ptx("bar.sync 9, 256;\n\tmov.u32 $0, 0;")
            else:
                if WG == 0:
                    ptx("bar.arrive 8, 256;\n\tmov.u32 $0, 0;")
                else:
                    ptx("bar.arrive 9, 256;\n\tmov.u32 $0, 0;")

    @gluon.jit
    def span(ctx, split, NUM_SPLITS, B, W_M1, WINDOWED):
        """Split ``split``'s keys of a sequence of ``ctx`` context tokens: ``(start, lo, hi,
        n_tiles, n_pre, mid_end)``: the window's first key; the split's keys [lo, hi), equal
        chunks of whole tiles from the first tile's start; its tiles, of which ``n_pre`` leading
        edge tiles and interior ones up to ``mid_end`` (the same ranges as the Triton kernel's,
        kept in step by hand: two DSLs, Gluon code here, ``triton.language`` there)."""
        if WINDOWED:
            start = gl.maximum(ctx - W_M1, 0)
        else:
            start = ctx * 0
        start_al = (start // BN) * BN
        chunk = gl.cdiv(gl.cdiv(ctx - start_al, NUM_SPLITS), BN) * BN
        lo = start_al + split * chunk
        hi = gl.minimum(ctx, lo + chunk)
        n_keys = gl.maximum(hi - lo, 0)
        n_tiles = gl.cdiv(n_keys, BN)
        n_full = n_keys // BN
        if WINDOWED:
            n_pre = gl.minimum(gl.maximum(gl.cdiv(ctx + B - 1 - W_M1 - lo, BN), 0), n_tiles)
        else:
            n_pre = n_tiles * 0
        mid_end = gl.maximum(n_pre, n_full)
        return start, lo, hi, n_tiles, n_pre, mid_end

    @gluon.jit
    def work_item(n, kvh, split, ctx, w):
        """One work item, (sequence ``n``, KV head ``kvh``, split ``split``) with ``ctx`` context
        tokens, as the :data:`Item` the partitions read (``w``: the launch's :data:`Work`, built in
        the kernel's entry)."""
        B, NUM_SPLITS, W_M1, WINDOWED = w.B, w.NUM_SPLITS, w.W_M1, w.WINDOWED
        start, lo, hi, n_tiles, n_pre, mid_end = span(ctx, split, NUM_SPLITS, B, W_M1, WINDOWED)
        has_blk = (split == NUM_SPLITS - 1).to(gl.int32)  # the last split also takes the block's keys
        return Item(n=n, kvh=kvh, split=split, ctx=ctx, start=start, lo=lo, hi=hi, n_tiles=n_tiles, n_pre=n_pre,
                    mid_end=mid_end, has_blk=has_blk)

    @gluon.jit
    def producer(p, w):
        """Stream the work item's interior tiles into the ring by TMA."""
        produce(p, w, 0)

    @gluon.jit
    def produce(p, it, g):
        """Stream item ``it``'s interior tiles ``n_pre .. mid_end`` into the ring, from ring tile
        ``g`` (tiles streamed before it); returns ``g`` after it."""
        bt_ptr, k_desc, v_desc, k_bufs, v_bufs, ready = p.bt_ptr, p.k_desc, p.v_desc, p.k_bufs, p.v_bufs, p.ready
        empty, s_btn, PAGE, R, TMA_PAGE, TMA_HEAD = p.empty, p.s_btn, p.PAGE, p.R, p.TMA_PAGE, p.TMA_HEAD
        TMA_COL = p.TMA_COL
        n, kvh, lo, n_pre, mid_end = it.n, it.kvh, it.lo, it.n_pre, it.mid_end
        NB: gl.constexpr = k_bufs.type.shape[0]
        n_bt = bt_ptr + n.to(gl.int64) * s_btn
        for i in range(mid_end - n_pre):
            idx = (g + i) % NB
            ph = ((g + i) // NB) & 1
            mbarrier.wait(empty.index(idx), ph ^ 1)
            t0 = lo + (n_pre + i) * BN
            mbarrier.expect(ready.index(idx), 2 * N_SUB * k_desc.block_type.nbytes)
            for j in gl.static_range(N_SUB):  # one box per page the tile spans (one when pages hold 64k keys)
                t = t0 + j * SUB
                row = gl.load(n_bt + (t // PAGE) % R) * TMA_PAGE + kvh * TMA_HEAD + t % PAGE
                if N_SUB == 1:
                    k_dst = k_bufs.index(idx)
                    v_dst = v_bufs.index(idx)
                else:
                    k_dst = k_bufs.index(idx).slice(j * SUB, SUB)
                    v_dst = v_bufs.index(idx).slice(j * SUB, SUB)
                tma.async_copy_global_to_shared(k_desc, [row, kvh * TMA_COL], ready.index(idx), k_dst)
                tma.async_copy_global_to_shared(v_desc, [row, kvh * TMA_COL], ready.index(idx), v_dst)
        return g + mid_end - n_pre

    @gluon.jit
    def softmax_step(s, ok, m_i, l_i, acc, v_buf, qk_scale, p_l: gl.constexpr, o_l: gl.constexpr,
                     MASKED: gl.constexpr):
        """One online-softmax update with raw scores ``s`` (``Q K^T``; ``qk_scale`` takes them to
        log2 units, folded into exp2's argument as one FMA) and values ``v_buf``."""
        if MASKED:
            s = gl.where(ok, s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)  # qk_scale > 0: max, then scale, is exact
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s * qk_scale - m_new[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_l))[:, None]
        acc = warpgroup_mma(gl.convert_layout(p.to(v_buf.dtype), p_l), v_buf, acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        return m_new, l_i, acc

    @gluon.jit
    def scores_step(s, m_i, l_i, qk_scale, o_l: gl.constexpr, p_l: gl.constexpr, dtype: gl.constexpr):
        """The softmax half of an unmasked online-softmax update of raw scores ``s``, its row values
        as lanes' (:func:`lane_fold`: [BM, 4], each of a row's four threads holding one): ``m_i``
        the row's reference (the same in each lane), ``l_i`` the row sum's lane partials. Returns
        ``(m_new, l_new, p, alpha, moved)``, ``p`` in P @ V's operand layout, ``alpha`` (the
        accumulator's rescale) and ``moved`` (nonzero where the warp's references moved) in the
        accumulator's layout. A reference moves only when the row's maximum passes it by more than
        ``RESCALE_SLACK`` (log2 units); a warp in which no lane's own maximum does skips the quad's
        shuffles for the row maximum (:func:`lane_ref`) and the rescale (:func:`rescale`)."""
        m_new, moved = lane_ref(lane_fold(s, True) * qk_scale, m_i)
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s * qk_scale - gl.convert_layout(lane_bcast(m_new, s.shape[1]), s.type.layout))
        l_i = l_i * alpha + lane_fold(p, False)
        D: gl.constexpr = o_l.instr_shape[1]
        return (m_new, l_i, gl.convert_layout(p.to(dtype), p_l), gl.convert_layout(lane_bcast(alpha, D), o_l),
                gl.convert_layout(lane_bcast(moved, D), o_l))

    @gluon.jit
    def lane_ref(x, m):
        """Each row's new reference from its lanes' own maxima ``x`` and the reference ``m`` ([BM, 4],
        lane values): the row maximum where it passes ``m`` by more than ``RESCALE_SLACK``, else ``m``;
        and the warp's vote (1 where any of its rows moved). A warp in which no lane's ``x`` passes its
        ``m + RESCALE_SLACK`` skips the quad's shuffles (a warp-uniform branch in PTX)."""
        return gl.inline_asm_elementwise(LANE_REF_PTX, "=f,=f,=r,=r,f,f,f,f", [x, m], dtype=(gl.float32, gl.int32),
                                         is_pure=True, pack=2)

    @gluon.jit
    def rescale(acc, alpha, moved):
        """``acc * alpha`` (``alpha``, ``moved`` in ``acc``'s shape and layout), the multiplies skipped
        by a warp whose ``moved`` is 0 (none of its rows' references moved, so each alpha is exp2(0)
        = 1): one branch a statement."""
        return gl.inline_asm_elementwise(RESCALE_PTX, RESCALE_CONSTRAINTS, [acc, alpha, moved],
                                         dtype=gl.float32, is_pure=True, pack=RESCALE_PACK)

    @gluon.jit
    def lane_bcast(x, N: gl.constexpr):
        """[BM, 4] lane values -> [BM, N] (N a power of two >= 8), each column the value of the lane
        that holds it in an MMA accumulator's layout (:func:`lane_fold` run backwards; the caller
        converts to that layout, which holds the same registers)."""
        for _ in gl.static_range(N.bit_length() - 4):
            x = gl.join(x, x).permute((0, 2, 1)).reshape([x.shape[0], x.shape[1] * 2])
        return gl.join(x, x).reshape([x.shape[0], x.shape[1] * 2])

    @gluon.jit
    def lane_fold(x, MAX: gl.constexpr):
        """``x`` [BM, BN] in the MMA accumulator layout (a thread holds columns ``8 g + 2 q + j``
        of its rows, ``q`` its lane in the row's quad) -> [BM, 4]: each thread's own columns
        added (``MAX``: their maximum), no shuffles (adjacent pairs, then columns ``c`` and ``c + n``
        until 4 are left); ``gl.sum(.., 1)`` (``gl.max``) of it is the row's."""
        a, b = x.reshape([x.shape[0], x.shape[1] // 2, 2]).split()
        x = gl.maximum(a, b) if MAX else a + b
        for _ in gl.static_range(x.shape[1].bit_length() - 3):
            a, b = x.reshape([x.shape[0], 2, x.shape[1] // 2]).permute((0, 2, 1)).split()
            x = gl.maximum(a, b) if MAX else a + b
        return x

    @gluon.jit
    def edge_tile(f, it, e, keys):
        """Private tile ``e < n_edge``: its context positions, which of them the mask keeps, and
        the load of their page indices started (masked: none for keys the mask drops), so that
        :func:`fetch_private` finds them in registers."""
        bt_ptr, s_btn, PAGE, R = f.bt_ptr, f.s_btn, f.PAGE, f.R
        n, start, lo, hi, n_pre, mid_end = it.n, it.start, it.lo, it.hi, it.n_pre, it.mid_end
        tile = e + (e >= n_pre).to(gl.int32) * (mid_end - n_pre)  # leading edge tiles, then trailing
        t = lo + tile * BN + keys
        t_ok = (t >= start) & (t < hi)
        return t, t_ok, gl.load(bt_ptr + n.to(gl.int64) * s_btn + (t // PAGE) % R, mask=t_ok, other=0)

    @gluon.jit
    def fetch_private(f, it, e, n_edge, kq, vq, keys, dims, edge):
        """Start the cp.async copy of private tile ``e`` into ``kq``/``vq`` (one commit group):
        a context tile (``e < n_edge``; ``edge`` from :func:`edge_tile`) or the block's keys;
        keys outside the mask are zero-filled, never read."""
        kp_ptr, vp_ptr, kb_ptr, vb_ptr, B, PAGE, s_kpp = f.kp_ptr, f.vp_ptr, f.kb_ptr, f.vb_ptr, f.B, f.PAGE, f.s_kpp
        s_kpt, s_kph, s_vpp, s_vpt, s_vph, s_kbn = f.s_kpt, f.s_kph, f.s_vpp, f.s_vpt, f.s_vph, f.s_kbn
        s_kbb, s_kbh, s_vbn, s_vbb, s_vbh = f.s_kbb, f.s_kbh, f.s_vbn, f.s_vbb, f.s_vbh
        n, kvh = it.n, it.kvh
        n64 = n.to(gl.int64)
        if e < n_edge:
            t, t_ok, pages = edge
            pg = pages.to(gl.int64)
            slot = (t % PAGE).to(gl.int64)
            k_row = gl.multiple_of(pg * s_kpp + slot * s_kpt + kvh.to(gl.int64) * s_kph, 8)  # fits(): 16-byte rows
            v_row = gl.multiple_of(pg * s_vpp + slot * s_vpt + kvh.to(gl.int64) * s_vph, 8)
            async_copy.async_copy_global_to_shared(kq, kp_ptr + k_row[:, None] + dims[None, :], mask=t_ok[:, None])
            async_copy.async_copy_global_to_shared(vq, vp_ptr + v_row[:, None] + dims[None, :], mask=t_ok[:, None])
        else:
            b_ok = keys < B
            kb_row = gl.multiple_of(n64 * s_kbn + keys.to(gl.int64) * s_kbb + kvh.to(gl.int64) * s_kbh, 8)
            async_copy.async_copy_global_to_shared(kq, kb_ptr + kb_row[:, None] + dims[None, :], mask=b_ok[:, None])
            vb_row = gl.multiple_of(n64 * s_vbn + keys.to(gl.int64) * s_vbb + kvh.to(gl.int64) * s_vbh, 8)
            async_copy.async_copy_global_to_shared(vq, vb_ptr + vb_row[:, None] + dims[None, :], mask=b_ok[:, None])
        async_copy.commit_group()

    @gluon.jit
    def consume(c, f, w, ROW0: gl.constexpr):
        """Rows ``ROW0 .. ROW0 + 63`` of the work item ``w``."""
        kq_bufs = c.kq_bufs
        PP: gl.constexpr = PINGPONG and kq_bufs.type.shape[0] == 2  # turns need two consumers
        if ROW0 == 0:
            turn(0, False, PP)  # consumer 0 takes the first turn
        consume_item(c, f, w, 0, ROW0)

    @gluon.jit
    def consume_item(c, f, it, g, ROW0: gl.constexpr):
        """Rows ``ROW0 .. ROW0 + 63`` of item ``it``: the ring's tiles from ring tile ``g`` on,
        then the private ones (``f``: what :func:`fetch_private` needs), then the output or the
        split's partial; returns ``g`` after the item's ring tiles."""
        q_ptr, out_ptr, lse_ptr, po_ptr, plse_ptr = c.q_ptr, c.out_ptr, c.lse_ptr, c.po_ptr, c.plse_ptr
        k_bufs, v_bufs, ready, empty, kq_bufs, vq_bufs = c.k_bufs, c.v_bufs, c.ready, c.empty, c.kq_bufs, c.vq_bufs
        q_bufs, NUM_SPLITS, s_qn, s_qb, s_qh, s_on = c.q_bufs, c.NUM_SPLITS, c.s_qn, c.s_qb, c.s_qh, c.s_on
        s_ob, s_oh, B, G, HQ, W_M1, qk_scale, CAUSAL = c.s_ob, c.s_oh, c.B, c.G, c.HQ, c.W_M1, c.qk_scale, c.CAUSAL
        WINDOWED, WANT_LSE = c.WINDOWED, c.WANT_LSE
        n, kvh, split, ctx, start, lo, hi = it.n, it.kvh, it.split, it.ctx, it.start, it.lo, it.hi
        n_tiles, n_pre, mid_end, has_blk = it.n_tiles, it.n_pre, it.mid_end, it.has_blk
        PP: gl.constexpr = PINGPONG and kq_bufs.type.shape[0] == 2  # turns need two consumers
        ME: gl.constexpr = ROW0 // BM
        OTHER: gl.constexpr = 1 - ME
        NB: gl.constexpr = k_bufs.type.shape[0]
        D: gl.constexpr = k_bufs.type.shape[2]
        s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
        o_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
        p_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_l, k_width=2)
        ld_l: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        n64 = n.to(gl.int64)
        kq = kq_bufs.index(ROW0 // BM)
        vq = vq_bufs.index(ROW0 // BM)

        # Private tiles, in each consumer's own buffers: e < n_edge are the context tiles a
        # mask cuts (leading window edge, then the trailing partial tile), e == n_edge the
        # block's keys (last split only). The block's keys need no context length or page
        # index: their copy starts before Q's load and they are used before the ring, while its
        # first tile is on its way. The first edge tile is then fetched while the ring runs;
        # the rest one after another after it (most programs have at most one).
        dims = gl.arange(0, D, layout=gl.SliceLayout(0, ld_l))
        keys = gl.arange(0, BN, layout=gl.SliceLayout(1, ld_l))
        n_edge = n_pre + (n_tiles - mid_end)
        n_priv = n_edge + has_blk
        # Q rows (block query j = row // G, head kvh * G + row % G) in registers: wgmma's A. Its
        # load is issued ahead of the private tiles' copies (lab/log.md#a11).
        rows = ROW0 + gl.arange(0, BM, layout=gl.SliceLayout(1, ld_l))
        row_ok = rows < B * G
        q_off = (n64 * s_qn + (rows // G).to(gl.int64)[:, None] * s_qb
                 + (kvh * G + rows % G).to(gl.int64)[:, None] * s_qh + dims[None, :])
        q = gl.load(q_ptr + q_off, mask=row_ok[:, None], other=0.0)
        # The first edge tile's page indices load with Q, so that both wait on one round trip (at a
        # wave's start the consumer, not the ring, is late; lab/log.md#a12).
        edge0 = edge_tile(f, it, 0, keys)
        if n_priv > 0:
            fetch_private(f, it, n_edge * has_blk, n_edge, kq, vq, keys, dims, edge0)  # the block's keys if any, else edge 0
        if Q_SMEM:  # wgmma's A from shared memory: 64 registers a thread fewer at head dim 256
            q_s = q_bufs.index(ME)
            q_s.store(q)
            fence_async_shared()
            gl.thread_barrier()  # every thread's rows are in
        else:
            q_s = gl.convert_layout(q, gl.DotOperandLayout(operand_index=0, parent=s_l, k_width=2))

        jrow = (ROW0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_l))) // G
        srow_ok = (ROW0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_l))) < B * G
        kcol = gl.arange(0, BN, layout=gl.SliceLayout(0, s_l))
        m_i = gl.full([BM], -1.0e30, gl.float32, layout=gl.SliceLayout(1, s_l))
        l_i = gl.zeros([BM], gl.float32, layout=gl.SliceLayout(1, s_l))
        acc = gl.zeros([BM, D], gl.float32, layout=o_l)

        # The block's keys, before the ring: a loop of 0 or 1 steps (triton 3.6's lowering of the
        # warp-specialized region crashed on an MMA under a runtime `if`; a loop compiles).
        for _ in range(has_blk):
            async_copy.wait_group(0)
            fence_async_shared()
            gl.thread_barrier()  # every thread's copies have landed
            s = warpgroup_mma(q_s, kq.permute((1, 0)), gl.zeros([BM, BN], gl.float32, layout=s_l),
                              use_acc=False, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
            ok = (kcol[None, :] < B) & srow_ok[:, None]
            if CAUSAL:
                ok = ok & (kcol[None, :] <= jrow[:, None])
            if WINDOWED:
                diff = jrow[:, None] - kcol[None, :]
                ok = ok & (diff <= W_M1) & (diff >= -W_M1)
            m_i, l_i, acc = softmax_step(s, ok, m_i, l_i, acc, vq, qk_scale, p_l, o_l, True)
            if n_edge > 0:
                gl.thread_barrier()  # every warp's MMAs on the block are done: the buffers are free
                fetch_private(f, it, 0, n_edge, kq, vq, keys, dims, edge0)

        # Interior tiles from the producer's ring: no mask. The row sums as lane partials there.
        n_ring = mid_end - n_pre
        l4 = lane_fold(gl.zeros([BM, BN], gl.float32, layout=s_l), False)
        lane = gl.arange(0, 4, layout=gl.SliceLayout(0, l4.type.layout))
        l_i = gl.where(lane[None, :] == 0, gl.convert_layout(l_i, gl.SliceLayout(1, l4.type.layout))[:, None], l4)
        m_i = gl.convert_layout(m_i, gl.SliceLayout(1, l4.type.layout))[:, None] + l4  # the same in each lane
        if OVERLAP:
            # Tile i's P @ V and tile i + 1's Q K^T are in flight while tile i + 1's softmax runs.
            dt: gl.constexpr = v_bufs.dtype
            p = gl.zeros([BM, BN], dt, layout=p_l)
            if n_ring > 0:
                mbarrier.wait(ready.index(g % NB), (g // NB) & 1)
                s = warpgroup_mma(q_s, k_bufs.index(g % NB).permute((1, 0)), gl.zeros([BM, BN], gl.float32, layout=s_l),
                                  use_acc=False, is_async=True)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
                m_i, l_i, p, alpha, moved = scores_step(s, m_i, l_i, qk_scale, o_l, p_l, dt)
                acc = acc * alpha  # the block's keys may already be in it
            for i in range(n_ring - 1):
                idx = (g + i) % NB
                nxt = (g + i + 1) % NB
                mbarrier.wait(ready.index(nxt), ((g + i + 1) // NB) & 1)
                turn(ME, True, PP)
                s = warpgroup_mma(q_s, k_bufs.index(nxt).permute((1, 0)),
                                  gl.zeros([BM, BN], gl.float32, layout=s_l), use_acc=False, is_async=True)
                acc = warpgroup_mma(p, v_bufs.index(idx), acc, is_async=True)
                turn(OTHER, False, PP)
                s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
                m_i, l_i, p, alpha, moved = scores_step(s, m_i, l_i, qk_scale, o_l, p_l, dt)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                mbarrier.arrive(empty.index(idx), count=1)
                acc = rescale(acc, alpha, moved)
            if n_ring > 0:
                last = (g + n_ring - 1) % NB
                acc = warpgroup_mma(p, v_bufs.index(last), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                mbarrier.arrive(empty.index(last), count=1)
        else:
            # With turns: Q K^T, then the other consumer's turn; P @ V at this one's next turn.
            turn(ME, True, PP)
            for i in range(n_ring):
                idx = (g + i) % NB
                mbarrier.wait(ready.index(idx), ((g + i) // NB) & 1)
                s = warpgroup_mma(q_s, k_bufs.index(idx).permute((1, 0)),
                                  gl.zeros([BM, BN], gl.float32, layout=s_l), use_acc=False, is_async=True)
                turn(OTHER, False, PP)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
                m_i, l_i, p, alpha, moved = scores_step(s, m_i, l_i, qk_scale, o_l, p_l, v_bufs.dtype)
                acc = rescale(acc, alpha, moved)
                turn(ME, True, PP)
                acc = warpgroup_mma(p, v_bufs.index(idx), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                mbarrier.arrive(empty.index(idx), count=1)
            turn(OTHER, False, PP)

        l_i = gl.convert_layout(gl.sum(l_i, 1), gl.SliceLayout(1, s_l))
        m_i = gl.convert_layout(gl.max(m_i, 1), gl.SliceLayout(1, s_l))
        for e in range(n_edge):  # the edge tiles, after the ring
            async_copy.wait_group(0)
            fence_async_shared()
            gl.thread_barrier()  # every thread's copies have landed
            s = warpgroup_mma(q_s, kq.permute((1, 0)), gl.zeros([BM, BN], gl.float32, layout=s_l),
                              use_acc=False, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
            tile = e + (e >= n_pre).to(gl.int32) * (mid_end - n_pre)
            tt = lo + tile * BN + kcol
            ok = (tt[None, :] >= start) & (tt[None, :] < hi) & srow_ok[:, None]
            if WINDOWED:
                ok = ok & (tt[None, :] >= ctx + jrow[:, None] - W_M1)
            m_i, l_i, acc = softmax_step(s, ok, m_i, l_i, acc, vq, qk_scale, p_l, o_l, True)
            if e + 1 < n_edge:
                gl.thread_barrier()  # every warp's MMAs on this tile are done: the buffers are free
                fetch_private(f, it, e + 1, n_edge, kq, vq, keys, dims, edge_tile(f, it, e + 1, keys))

        has = l_i > 0.0
        l_safe = gl.where(has, l_i, 1.0)
        o = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, o_l))[:, None]
        orow = ROW0 + gl.arange(0, BM, layout=gl.SliceLayout(1, o_l))
        odim = gl.arange(0, D, layout=gl.SliceLayout(0, o_l))
        o_ok = orow < B * G
        head = kvh * G + orow % G
        # Stores are predicated on runtime flags, not branches: triton 3.6's lowering of the
        # warp-specialized region crashed on a constexpr-dead store, and on a runtime branch on
        # NUM_SPLITS too (launches specialize an argument equal to 1 into a constant, so one
        # branch is dead at every batch of one split; seen on the H200). One split: the output,
        # and the LSE (natural log) when WANT_LSE != 0. Several: the float32 partial and its
        # LSE (log2) at [N, B, HQ, NUM_SPLITS, D] / [N, B, HQ, NUM_SPLITS], merged afterwards.
        if Q_SMEM:  # head dim 256: no room beside Q's buffers for the conversion's scratch
            o_off = (n64 * s_on + (orow // G).to(gl.int64)[:, None] * s_ob + head.to(gl.int64)[:, None] * s_oh
                     + odim[None, :])
            gl.store(out_ptr + o_off, o.to(out_ptr.dtype.element_ty), mask=o_ok[:, None] & (NUM_SPLITS == 1))
        else:  # through the blocked layout: 16-byte vectors, whole row segments a warp (lab/log.md#a27)
            ob = gl.convert_layout(o.to(out_ptr.dtype.element_ty), ld_l)
            srow = ROW0 + gl.arange(0, BM, layout=gl.SliceLayout(1, ld_l))  # Q's rows, not kept live through the ring
            so_off = (n64 * s_on + (srow // G).to(gl.int64)[:, None] * s_ob
                      + (kvh * G + srow % G).to(gl.int64)[:, None] * s_oh + dims[None, :])
            gl.store(out_ptr + so_off, ob, mask=(srow < B * G)[:, None] & (NUM_SPLITS == 1))
        prow = (n64 * B + (orow // G).to(gl.int64)) * HQ + head.to(gl.int64)
        gl.store(po_ptr + (prow * NUM_SPLITS + split)[:, None] * D + odim[None, :], o,
                 mask=o_ok[:, None] & (NUM_SPLITS > 1))
        lrow = ROW0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_l))
        lse2 = gl.where(has, m_i + gl.log2(l_safe), float("-inf"))
        l_off = (n64 * B + (lrow // G).to(gl.int64)) * HQ + (kvh * G + lrow % G).to(gl.int64)
        l_ok = lrow < B * G
        gl.store(lse_ptr + l_off, lse2 * 0.6931471805599453, mask=l_ok & (WANT_LSE != 0) & (NUM_SPLITS == 1))
        gl.store(plse_ptr + l_off * NUM_SPLITS + split, lse2, mask=l_ok & (NUM_SPLITS > 1))
        return g + n_ring

    @gluon.jit
    def consumer0(c, f, w):
        consume(c, f, w, 0)

    @gluon.jit
    def consumer1(c, f, w):
        consume(c, f, w, BM)

    @gluon.jit
    def gluon_window_block_kernel(q_ptr, kp_ptr, vp_ptr, kb_ptr, vb_ptr, out_ptr, lse_ptr, po_ptr, plse_ptr, bt_ptr,
               ctx_ptr, k_desc, v_desc,
               s_qn, s_qb, s_qh, s_kpp, s_kpt, s_kph, s_vpp, s_vpt, s_vph, s_kbn, s_kbb, s_kbh,
               s_vbn, s_vbb, s_vbh, s_on, s_ob, s_oh, s_btn, N, B, G, HQ, HKV, R, PAGE, W_M1, qk_scale, TMA_PAGE, TMA_HEAD, TMA_COL,
               WANT_LSE, NUM_SPLITS, NB: gl.constexpr, CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
               PRODUCER_REGS: gl.constexpr,
               CAUSAL: gl.constexpr, WINDOWED: gl.constexpr):
        # The work: this program's (sequence, KV head, split) item, (pid // HKV, pid % HKV, split).
        pid = gl.program_id(0)
        w = Work(ctx_ptr=ctx_ptr, total=N * HKV * NUM_SPLITS, B=B, HKV=HKV, NUM_SPLITS=NUM_SPLITS, W_M1=W_M1,
                 WINDOWED=WINDOWED)
        split = gl.program_id(1)
        n = pid // HKV
        work = work_item(n, pid % HKV, split, gl.load(ctx_ptr + n), w)

        D: gl.constexpr = k_desc.block_type.shape[1]
        k_bufs = gl.allocate_shared_memory(k_desc.dtype, [NB, BN, D], k_desc.layout)
        v_bufs = gl.allocate_shared_memory(v_desc.dtype, [NB, BN, D], v_desc.layout)
        kq_bufs = gl.allocate_shared_memory(k_desc.dtype, [CONSUMERS, BN, D], k_desc.layout)
        vq_bufs = gl.allocate_shared_memory(v_desc.dtype, [CONSUMERS, BN, D], v_desc.layout)
        if Q_SMEM:
            q_bufs = gl.allocate_shared_memory(k_desc.dtype, [CONSUMERS, BM, D], k_desc.layout)
        else:
            q_bufs = kq_bufs  # unused: Q stays in registers
        ready = gl.allocate_shared_memory(gl.int64, [NB, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NB, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(NB):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=CONSUMERS)

        # One argument group per role: the producer's, the consumers', the private-tile copies'.
        p = ProducerArgs(bt_ptr=bt_ptr, k_desc=k_desc, v_desc=v_desc, k_bufs=k_bufs, v_bufs=v_bufs, ready=ready,
                         empty=empty, s_btn=s_btn, PAGE=PAGE, R=R, TMA_PAGE=TMA_PAGE, TMA_HEAD=TMA_HEAD,
                         TMA_COL=TMA_COL)
        c = ConsumerArgs(q_ptr=q_ptr, out_ptr=out_ptr, lse_ptr=lse_ptr, po_ptr=po_ptr, plse_ptr=plse_ptr,
                         k_bufs=k_bufs, v_bufs=v_bufs, ready=ready, empty=empty, kq_bufs=kq_bufs, vq_bufs=vq_bufs,
                         q_bufs=q_bufs, NUM_SPLITS=NUM_SPLITS, s_qn=s_qn, s_qb=s_qb, s_qh=s_qh, s_on=s_on, s_ob=s_ob,
                         s_oh=s_oh, B=B, G=G, HQ=HQ, W_M1=W_M1, qk_scale=qk_scale, CAUSAL=CAUSAL, WINDOWED=WINDOWED,
                         WANT_LSE=WANT_LSE)
        f = PrivateArgs(bt_ptr=bt_ptr, kp_ptr=kp_ptr, vp_ptr=vp_ptr, kb_ptr=kb_ptr, vb_ptr=vb_ptr, B=B, s_btn=s_btn,
                        PAGE=PAGE, R=R, s_kpp=s_kpp, s_kpt=s_kpt, s_kph=s_kph, s_vpp=s_vpp, s_vpt=s_vpt, s_vph=s_vph,
                        s_kbn=s_kbn, s_kbb=s_kbb, s_kbh=s_kbh, s_vbn=s_vbn, s_vbb=s_vbb, s_vbh=s_vbh)
        if CONSUMERS == 2:
            gl.warp_specialize([(consumer0, (c, f, work)), (consumer1, (c, f, work)), (producer, (p, work))], [4, 1],
                               [CONSUMER_REGS, PRODUCER_REGS])
        else:
            gl.warp_specialize([(consumer0, (c, f, work)), (producer, (p, work))], [1], [PRODUCER_REGS])

    return gluon_window_block_kernel


def default_overlap(num_splits: int, d: int) -> bool:
    """:data:`TUNED` ``overlap``: the intra-warpgroup overlap build where a program streams a
    whole window (one split: a long ring) at head dim 128; with many splits a program's ring
    is too short for it to pay, and head dim 64's overlap build spills (``ptxas -v``)."""
    return num_splits == 1 and d == 128


def default_pingpong(d: int) -> bool:
    """:data:`TUNED` ``pingpong``: the two consumers take turns at the tensor cores (FA3's
    scheduler barriers) except at head dim 256, where they were measured to cost more than
    they hide."""
    return d != 256


def launch(q, cache, k_blk, v_blk, mask, scale: float, return_lse: bool = False, num_splits: int = 1,
           num_buf: Optional[int] = None, consumer_regs: int = CONSUMER_REGS, producer_regs: Optional[int] = None,
           overlap: Optional[bool] = None, pingpong: Optional[bool] = None):
    """Run the kernel (callers check :func:`fits`) on a grid of ``N * Hkv`` x ``num_splits``
    programs; with ``num_splits > 1`` the partials are merged by the Triton kernel's reduce.
    Builds (:func:`_kernel`): ``pingpong`` by default except at head dim 256 (:func:`default_pingpong`); ``overlap`` by default where each
    program streams a whole window (one split) at head dim 128 (:func:`default_overlap`).
    Returns ``out`` or ``(out, lse)``."""
    n, b, hq, d = q.shape
    hkv = k_blk.shape[2]
    g = hq // hkv
    kp, vp, bt = cache.k_pages, cache.v_pages, cache.block_table
    page = kp.shape[1]
    bt = bt if bt.dtype == torch.int32 else bt.to(torch.int32)
    ctx = cache.ctx_lens if cache.ctx_lens.dtype == torch.int32 else cache.ctx_lens.to(torch.int32)
    elt = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    bn, q_smem, num_buf, lay, sub = _build(d, page, elt, num_buf, bt.shape[1] == 1)
    (k_rows, strides), (v_rows, _) = tma_rows(kp), tma_rows(vp)  # fits(): one layout for both
    k_desc = TensorDescriptor.from_tensor(k_rows, [sub, d], lay)
    v_desc = TensorDescriptor.from_tensor(v_rows, [sub, d], lay)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((n, b, hq), dtype=torch.float32, device=q.device) if return_lse else None
    if num_splits > 1:
        po, plse = split_scratch(n, b, hq, num_splits, d, q.device)
    else:
        po = plse = lse if lse is not None else out  # not written with one split
    consumers = 2 if b * g > TILE else 1
    warps = 4 + 4 * consumers  # default partition + the workers, in warpgroups
    windowed = mask.window is not None
    if overlap is None:
        overlap = default_overlap(num_splits, d)
    if pingpong is None:
        pingpong = default_pingpong(d)
    if producer_regs is None:
        producer_regs = PRODUCER_REGS
    grid = (n * hkv, num_splits)
    _kernel(overlap, sub, pingpong, bn, q_smem)[grid](
        q, kp, vp, k_blk, v_blk, out, lse if lse is not None else out, po, plse, bt, ctx, k_desc, v_desc,
        q.stride(0), q.stride(1), q.stride(2), kp.stride(0), kp.stride(1), kp.stride(2),
        vp.stride(0), vp.stride(1), vp.stride(2), k_blk.stride(0), k_blk.stride(1), k_blk.stride(2),
        v_blk.stride(0), v_blk.stride(1), v_blk.stride(2), out.stride(0), out.stride(1), out.stride(2), bt.stride(0),
        n, b, g, hq, hkv, bt.shape[1], page, mask.reach if windowed else 0, float(scale) * LOG2E, *strides,
        int(return_lse), num_splits, NB=num_buf, CONSUMERS=consumers, CONSUMER_REGS=consumer_regs,
        PRODUCER_REGS=producer_regs, CAUSAL=bool(mask.causal),
        WINDOWED=windowed, num_warps=4, maxnreg=min(255, 65536 // (32 * warps)) // 8 * 8,
    )
    if num_splits > 1:
        merge_splits(po, plse, out, lse)
    return (out, lse) if return_lse else out

