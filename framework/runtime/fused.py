"""Fused Triton kernels for the reference host's elementwise work on CUDA.

Each function computes exactly what the eager modules of :mod:`.modules` compute (same
float32 math, same rounding to the input dtype at the same points) in one kernel instead of
five to ten: RMSNorm, per-head RMSNorm followed by partial NeoX RoPE, and the gated MLP
activation. :func:`enabled` says whether the host uses them: CUDA tensors, Triton present,
and ``DRAFTSMITH_FUSED`` not ``0``. On CPU tensors they run only through Triton's
interpreter (tests); the host keeps its eager code there.
"""

from __future__ import annotations

import os

import torch

from ...lowering.jit import check_interpreter, jitted, next_pow2, triton

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


def _bias_argmax_kernel(lm_ptr, bias_ptr, out_ptr, pmax_ptr, pidx_ptr, V, NB, s_lm, s_b, s_o,
                        HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    """Row ``n``, vocab block ``vb``: ``out = float(lm) + float(bias)`` (float32, stored), and
    the block's maximum and its first index (``pmax``/``pidx [N, NB]``)."""
    n = tl.program_id(0).to(tl.int64)
    vb = tl.program_id(1)
    cols = vb * BLOCK + tl.arange(0, BLOCK)
    ok = cols < V
    x = tl.load(lm_ptr + n * s_lm + cols, mask=ok, other=0.0).to(tl.float32)
    if HAS_BIAS:
        x = x + tl.load(bias_ptr + n * s_b + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + n * s_o + cols, x, mask=ok)
    x = tl.where(ok, x, float("-inf"))
    m, i = tl.max(x, 0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(pmax_ptr + n * NB + vb, m)
    tl.store(pidx_ptr + n * NB + vb, vb.to(tl.int64) * BLOCK + i.to(tl.int64))


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


def bias_argmax(lm: torch.Tensor, bias, out: torch.Tensor) -> torch.Tensor:
    """One draft slot's head: ``out[:] = float(lm) + float(bias)`` (``bias`` may be ``None``)
    and the first index of each row's maximum. ``lm``, ``bias`` ``[N, V]`` (any float dtype,
    unit column stride), ``out`` ``[N, V]`` float32. Returns ``[N]`` int64 (``torch.argmax``'s
    choice for finite rows)."""
    _check(lm)
    n, v = lm.shape
    if out.dtype != torch.float32 or out.shape != lm.shape or (bias is not None and bias.shape != lm.shape):
        raise ValueError("bias_argmax: lm, bias [N, V]; out [N, V] float32")
    for name, t in (("lm", lm), ("bias", bias), ("out", out)):
        if t is not None and t.stride(-1) != 1:
            raise ValueError(f"bias_argmax: {name} needs a unit column stride")
    block = 4096
    nb = triton.cdiv(v, block)
    pmax = torch.empty((n, nb), dtype=torch.float32, device=lm.device)
    pidx = torch.empty((n, nb), dtype=torch.int64, device=lm.device)
    if n:
        b = bias if bias is not None else lm
        (kern,) = jitted(_bias_argmax_kernel)
        kern[(n, nb)](lm, b, out, pmax, pidx, v, nb, lm.stride(0), b.stride(0), out.stride(0),
                      HAS_BIAS=bias is not None, BLOCK=block, num_warps=8)
    return pidx.gather(1, pmax.argmax(1, keepdim=True)).squeeze(1)
