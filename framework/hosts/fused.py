"""Fused Triton kernels for the reference host's elementwise work on CUDA.

Each function computes exactly what the eager modules of :mod:`.modules` compute (same
float32 math, same rounding to the input dtype at the same points) in one kernel instead of
five to ten: RMSNorm, per-head RMSNorm followed by partial NeoX RoPE, the gated MLP
activation, and a draft slot's head (the Markov bias GEMM, accumulated in float32 in another
order than cuBLAS and rounded where it rounds, the add, the float32 logits and the argmax).
:func:`enabled` says whether the host uses them: CUDA tensors, Triton present,
and ``DRAFTSMITH_FUSED`` not ``0``. On CPU tensors they run only through Triton's
interpreter (tests); the host keeps its eager code there.
"""

from __future__ import annotations

import os

import torch

from draftsmith.lowering.jit import check_interpreter, jitted, next_pow2, triton

if triton is not None:
    import triton.language as tl
else:  # pragma: no cover - depends on the environment
    from types import SimpleNamespace

    tl = SimpleNamespace(constexpr="constexpr")


def enabled(x: torch.Tensor) -> bool:
    """Use the fused kernels for ``x``: on CUDA, with Triton, unless ``DRAFTSMITH_FUSED=0``."""
    return x.is_cuda and triton is not None and os.environ.get("DRAFTSMITH_FUSED", "1") != "0"


# --------------------------------------------------------------------------------------
# Kernels (plain functions; decorated lazily per interpreter mode by ``jitted``)
# --------------------------------------------------------------------------------------


def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, D, eps, s_x, s_o, GEMMA: tl.constexpr, BLOCK: tl.constexpr):
    """One row: ``out = x * rsqrt(mean(x^2) + eps) * w`` (``1 + w`` for Gemma), float32 math."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < D
    x = tl.load(x_ptr + row * s_x + cols, mask=ok, other=0.0).to(tl.float32)
    r = tl.math.rsqrt(tl.sum(x * x, 0) / D + eps)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    if GEMMA:
        w = 1.0 + w
    tl.store(out_ptr + row * s_o + cols, (x * r * w).to(out_ptr.dtype.element_ty), mask=ok)


def _norm_rope_kernel(x_ptr, w_ptr, pos_ptr, freq_ptr, out_ptr, H, D, s_xt, eps, HALF, ROT,
                      GEMMA: tl.constexpr, HB: tl.constexpr, D_PAD: tl.constexpr):
    """Token ``t``, heads ``hb*HB ..``: per-head RMSNorm (rounded to the output dtype, as the
    eager norm returns it), then NeoX RoPE on dims ``0..ROT-1`` with angles formed in float64.

    ``x`` is ``[T, H, D]`` with token stride ``s_xt`` (heads and dims packed; e.g. the q columns
    of a fused q/k/v projection), ``out`` ``[T, H, D]`` contiguous; ``pos [T]`` int64;
    ``freq [ROT/2]`` float64.
    The rotation partner of dim ``i`` is ``i + HALF`` (``i < HALF``) or ``i - HALF``; it is
    re-loaded and normalised with the same row scale instead of shuffled in registers.
    """
    t = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * HB + tl.arange(0, HB)
    dim = tl.arange(0, D_PAD)
    rot = dim < ROT
    lower = dim < HALF
    partner = tl.where(rot, tl.where(lower, dim + HALF, dim - HALF), dim)
    ok = (heads < H)[:, None] & (dim < D)[None, :]
    base = x_ptr + t * s_xt + heads.to(tl.int64)[:, None] * D
    x = tl.load(base + dim[None, :], mask=ok, other=0.0).to(tl.float32)
    xp = tl.load(base + partner[None, :], mask=ok, other=0.0).to(tl.float32)
    r = tl.math.rsqrt(tl.sum(x * x, 1) / D + eps)[:, None]
    w = tl.load(w_ptr + dim, mask=dim < D, other=0.0).to(tl.float32)
    wp = tl.load(w_ptr + partner, mask=dim < D, other=0.0).to(tl.float32)
    if GEMMA:
        w = 1.0 + w
        wp = 1.0 + wp
    y = (x * r * w[None, :]).to(out_ptr.dtype.element_ty).to(tl.float32)
    yp = (xp * r * wp[None, :]).to(out_ptr.dtype.element_ty).to(tl.float32)
    fi = tl.where(lower, dim, dim - HALF)
    freq = tl.load(freq_ptr + fi, mask=rot, other=0.0)
    ang = tl.load(pos_ptr + t).to(tl.float64) * freq
    cos = tl.where(rot, tl.cos(ang).to(tl.float32), 1.0)
    sin = tl.where(rot, tl.sin(ang).to(tl.float32), 0.0)
    sign = tl.where(lower, -1.0, 1.0)
    out = y * cos[None, :] + sign[None, :] * (yp * sin[None, :])
    tl.store(out_ptr + t * H * D + heads.to(tl.int64)[:, None] * D + dim[None, :],
             out.to(out_ptr.dtype.element_ty), mask=ok)


def _gated_act_kernel(g_ptr, u_ptr, out_ptr, numel, cols, s_g, s_u, alpha, limit,
                      OAI: tl.constexpr, BLOCK: tl.constexpr):
    """``silu(g) * u`` or the clamped ``g * sigmoid(alpha g) * (u + 1)``; float32 math.

    ``g``/``u`` are ``[rows, cols]`` with row strides ``s_g``/``s_u``; ``out`` contiguous.
    """
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = i < numel
    row, col = i // cols, i % cols
    g = tl.load(g_ptr + row * s_g + col, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + row * s_u + col, mask=ok, other=0.0).to(tl.float32)
    if OAI:
        g = tl.minimum(g, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
        a = g * tl.sigmoid(alpha * g) * (u + 1.0)
    else:
        a = g * tl.sigmoid(g) * u
    tl.store(out_ptr + i, a.to(out_ptr.dtype.element_ty), mask=ok)


def _head_argmax_kernel(lm_ptr, e_ptr, w_ptr, out_ptr, pmax_ptr, pidx_ptr, N, V, R, NB, s_lm, s_e, s_w, s_o,
                        MARKOV: tl.constexpr, F32_DOT: tl.constexpr,
                        BN: tl.constexpr, BV: tl.constexpr, BR: tl.constexpr):
    """Rows ``nb * BN ..``, vocab columns ``vb * BV ..`` of one draft slot's head:
    ``out = float(lm) + float(bias)`` (float32, stored) with ``bias = e @ w2^T`` accumulated in
    float32 and rounded to the weights' dtype, as the eager Markov head's GEMM does; then each
    row's maximum over the block and its first index (``pmax``/``pidx [N, NB]``)."""
    nb = tl.program_id(0)  # fastest: the row blocks of one vocab tile share its w2 rows in L2
    vb = tl.program_id(1)
    rows = (nb * BN + tl.arange(0, BN)).to(tl.int64)
    cols = (vb * BV + tl.arange(0, BV)).to(tl.int64)
    r_ok = rows < N
    c_ok = cols < V
    ok = r_ok[:, None] & c_ok[None, :]
    x = tl.load(lm_ptr + rows[:, None] * s_lm + cols[None, :], mask=ok, other=0.0).to(tl.float32)
    if MARKOV:
        acc = tl.zeros([BN, BV], dtype=tl.float32)
        for k0 in range(0, R, BR):
            ks = k0 + tl.arange(0, BR)
            k_ok = ks < R
            e = tl.load(e_ptr + rows[:, None] * s_e + ks[None, :], mask=r_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptr + cols[:, None] * s_w + ks[None, :], mask=c_ok[:, None] & k_ok[None, :], other=0.0)
            if F32_DOT:
                acc = tl.dot(e.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
            else:
                acc = tl.dot(e, tl.trans(w), acc)
        if w_ptr.dtype.element_ty == tl.bfloat16:
            # round to nearest even by hand: Triton's interpreter truncates float32 -> bfloat16
            bits = acc.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            acc = bits.to(tl.float32, bitcast=True)
        else:
            acc = acc.to(w_ptr.dtype.element_ty).to(tl.float32)
        x = x + acc
    tl.store(out_ptr + rows[:, None] * s_o + cols[None, :], x, mask=ok)
    x = tl.where(c_ok[None, :], x, float("-inf"))
    m, i = tl.max(x, 1, return_indices=True, return_indices_tie_break_left=True)
    tl.store(pmax_ptr + rows * NB + vb, m, mask=r_ok)
    tl.store(pidx_ptr + rows * NB + vb, vb.to(tl.int64) * BV + i.to(tl.int64), mask=r_ok)


def _check(x: torch.Tensor) -> None:
    if triton is None:
        raise RuntimeError("fused host kernels need triton")
    if not x.is_cuda:
        check_interpreter()


# --------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, gemma: bool) -> torch.Tensor:
    """RMSNorm over the last dim of ``x`` (any leading shape); returns ``x.dtype``."""
    _check(x)
    d = x.shape[-1]
    x2 = x.reshape(-1, d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    if x2.shape[0]:
        block = max(16, next_pow2(d))
        (kern,) = jitted(_rms_norm_kernel)
        kern[(x2.shape[0],)](x2, weight, out, d, float(eps), x2.stride(0), out.stride(0), GEMMA=bool(gemma),
                             BLOCK=block, num_warps=8 if block >= 4096 else 4)
    return out.view(x.shape)


def norm_rope(x: torch.Tensor, weight: torch.Tensor, eps: float, gemma: bool, pos: torch.Tensor,
              inv_freq: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """Per-head RMSNorm then partial NeoX RoPE: ``x [..., T, H, D]``, ``pos [..., T]`` int,
    ``inv_freq [rotary_dim / 2]`` float64. Returns ``x.dtype``, shape of ``x``."""
    _check(x)
    h, d = x.shape[-2], x.shape[-1]
    xc = x.reshape(-1, h, d)  # a view for column slices of a fused projection: no copy
    if xc.stride(2) != 1 or xc.stride(1) != d:
        xc = xc.contiguous()
    t = xc.shape[0]
    out = torch.empty(xc.shape, dtype=x.dtype, device=x.device)
    if t:
        posc = pos.reshape(-1).to(torch.int64).contiguous()
        if posc.numel() != t:
            raise ValueError(f"pos has {posc.numel()} positions for {t} tokens")
        d_pad = max(16, next_pow2(d))
        hb = max(1, min(next_pow2(h), 4096 // d_pad))
        (kern,) = jitted(_norm_rope_kernel)
        freq = inv_freq.to(torch.float64).contiguous()
        kern[(t, -(-h // hb))](xc, weight, posc, freq, out, h, d, xc.stride(0), float(eps), rotary_dim // 2,
                               rotary_dim, GEMMA=bool(gemma), HB=hb, D_PAD=d_pad, num_warps=4)
    return out.view(x.shape)


def gated_act(g: torch.Tensor, u: torch.Tensor, kind: str, alpha: float, limit: float) -> torch.Tensor:
    """The gated MLP activation of ``g``/``u [..., I]`` (same shape; rows may be strided views
    of a fused gate/up output). ``kind``: ``swiglu`` or ``swiglu_oai``. Returns ``g.dtype``."""
    _check(g)
    if g.shape != u.shape:
        raise ValueError(f"gate {tuple(g.shape)} and up {tuple(u.shape)} differ")
    cols = g.shape[-1]
    g2, u2 = g.reshape(-1, cols), u.reshape(-1, cols)
    if g2.stride(-1) != 1 or u2.stride(-1) != 1:
        g2, u2 = g2.contiguous(), u2.contiguous()
    out = torch.empty(g2.shape, dtype=g.dtype, device=g.device)
    numel = out.numel()
    if numel:
        block = 2048
        (kern,) = jitted(_gated_act_kernel)
        kern[(triton.cdiv(numel, block),)](g2, u2, out, numel, cols, g2.stride(0), u2.stride(0), float(alpha),
                                           float(limit), OAI=(kind == "swiglu_oai"), BLOCK=block, num_warps=4)
    return out.view(g.shape)


def head_argmax(lm: torch.Tensor, out: torch.Tensor, emb=None, w2=None) -> torch.Tensor:
    """One draft slot's head in one kernel: ``out[:] = float(lm) + float(w2 @ emb)`` (the Markov
    bias, rounded to ``w2.dtype`` as the eager head's GEMM rounds it; none when ``emb`` is
    ``None``) and the first index of each row's maximum.

    ``lm [N, V]`` (any float dtype), ``emb [N, r]``, ``w2 [V, r]``, ``out [N, V]`` float32; unit
    column strides. Returns ``[N]`` int64 (``torch.argmax``'s choice for finite rows).
    """
    _check(lm)
    n, v = lm.shape
    markov = emb is not None
    if out.dtype != torch.float32 or out.shape != lm.shape:
        raise ValueError("head_argmax: lm [N, V]; out [N, V] float32")
    if markov and (w2 is None or emb.shape[0] != n or w2.shape != (v, emb.shape[1]) or emb.dtype != w2.dtype):
        raise ValueError("head_argmax: emb [N, r] and w2 [V, r] of one dtype")
    for name, t in (("lm", lm), ("emb", emb), ("w2", w2), ("out", out)):
        if t is not None and t.stride(-1) != 1:
            raise ValueError(f"head_argmax: {name} needs a unit column stride")
    bn, bv = min(64, max(16, next_pow2(n))), 128
    nb = triton.cdiv(v, bv)
    pmax = torch.empty((n, nb), dtype=torch.float32, device=lm.device)
    pidx = torch.empty((n, nb), dtype=torch.int64, device=lm.device)
    if n:
        e, w = (emb, w2) if markov else (lm, lm)
        r = emb.shape[1] if markov else 1
        (kern,) = jitted(_head_argmax_kernel)
        kern[(triton.cdiv(n, bn), nb)](
            lm, e, w, out, pmax, pidx, n, v, r, nb, lm.stride(0), e.stride(0), w.stride(0), out.stride(0),
            MARKOV=markov, F32_DOT=not lm.is_cuda or w.dtype == torch.float32,
            BN=bn, BV=bv, BR=min(64, max(16, next_pow2(r))), num_warps=8)
    return pidx.gather(1, pmax.argmax(1, keepdim=True)).squeeze(1)
