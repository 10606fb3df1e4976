"""One drafter decoder layer (drafter reference, section 1, step 3).

Parameter names follow the DFlash target layout: ``input_layernorm``,
``post_attention_layernorm``, ``self_attn.{q,k,v,o}_proj``, ``self_attn.{q,k}_norm``,
``mlp.{gate,up,down}_proj``; DFlash 2 adds ``attention_conv`` and ``mlp_conv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ...lowering.base import MaskSpec, PagedKV
from ..compile.resolved import ResolvedDrafter

from . import fused
from .dflash2 import BlockConv, layer_forward
from .modules import GatedMLP, PartialNeoxRope, RMSNorm, share_rows, stacked_weight


@dataclass(frozen=True)
class LayerShape:
    """The sizes one layer needs (:meth:`of` a :class:`ResolvedDrafter`)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    rope_theta: float
    eps: float
    inter: int
    mlp: str  # "swiglu" | "swiglu_oai"
    alpha: float
    limit: float
    value_scale: float = 1.0  # every value multiplied by it before attention (1: none)
    attention_bias: bool = False  # q/k/v/o_proj carry a bias
    mlp_bias: bool = False  # gate/up/down_proj carry a bias
    qk_norm: bool = True  # q and k RMS-normed per head before RoPE

    @classmethod
    def of(cls, r: ResolvedDrafter) -> "LayerShape":
        """The layer shape of a compiled drafter (``alpha``/``limit`` 0 for plain swiglu: unused)."""
        d = r.dims
        return cls(hidden=d.hidden, heads=d.heads, kv_heads=d.kv_heads, head_dim=d.head_dim,
                   rotary_dim=d.rotary_dim, rope_theta=r.rope.theta, eps=r.rms_norm_eps, inter=d.intermediate,
                   mlp=r.mlp.kind, alpha=r.mlp.alpha or 0.0, limit=r.mlp.limit or 0.0,
                   value_scale=r.value_scale, attention_bias=r.attention_bias, mlp_bias=r.mlp_bias,
                   qk_norm=r.qk_norm)


class DFlashAttention(nn.Module):
    """GQA attention of the block over [context ; block] keys through a lowering function.

    ``q_norm``/``k_norm`` are per head (over ``head_dim``), ``None`` without q/k norms; the
    projections carry biases when ``attention_bias``; RoPE is partial NeoX.
    """

    def __init__(self, s: LayerShape, q_gemma: bool, k_gemma: bool, rope: PartialNeoxRope):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s.heads, s.kv_heads, s.head_dim
        bias = s.attention_bias
        self.q_proj = nn.Linear(s.hidden, s.heads * s.head_dim, bias=bias)
        self.k_proj = nn.Linear(s.hidden, s.kv_heads * s.head_dim, bias=bias)
        self.v_proj = nn.Linear(s.hidden, s.kv_heads * s.head_dim, bias=bias)
        self.o_proj = nn.Linear(s.heads * s.head_dim, s.hidden, bias=bias)
        self.q_norm = RMSNorm(s.head_dim, s.eps, q_gemma) if s.qk_norm else None
        self.k_norm = RMSNorm(s.head_dim, s.eps, k_gemma) if s.qk_norm else None
        self.scale = s.head_dim**-0.5
        self.value_scale = s.value_scale
        self.rope = rope  # shared by all layers; holds no parameters
        self.qkv = None  # set by stack_weights()

    def stack_weights(self) -> None:
        """q/k/v_proj as row blocks of one weight (one GEMM on CUDA); call before loading.
        With biases the projections stay separate (each ``nn.Linear`` adds its own)."""
        if self.q_proj.bias is None:
            self.qkv = share_rows(self.q_proj, self.k_proj, self.v_proj)

    def project(self, y: torch.Tensor, with_q: bool = True):
        """``(q_proj(y) or None, k_proj(y), v_proj(y))``; one GEMM on CUDA when stacked."""
        w = stacked_weight(self.qkv, self.q_proj, self.k_proj, self.v_proj) if fused.enabled(y) else None
        if w is None:
            return (self.q_proj(y) if with_q else None), self.k_proj(y), self.v_proj(y)
        nq, nkv = self.q_proj.weight.shape[0], self.k_proj.weight.shape[0]
        if not with_q:
            k, v = F.linear(y, w[nq:]).split(nkv, dim=-1)
            return None, k, v
        return F.linear(y, w).split((nq, nkv, nkv), dim=-1)

    def kv(self, y: torch.Tensor, pos: torch.Tensor, kv_proj=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys/values of ``y [..., T, hidden]`` at positions ``pos [..., T]``.

        Returns ``k = rope(k_norm(k_proj(y)))``, ``v = value_scale * v_proj(y)`` (scaled before it
        is cached, for block and context alike, as SGLang 0.5.23 ``models/dflash.py`` does in
        ``DFlashAttention.forward`` and its context K/V path), each ``[..., T, Hkv, D]``.
        ``kv_proj``: ``(k_proj(y), v_proj(y))`` when already computed.
        """
        shp = y.shape[:-1] + (self.kv_heads, self.head_dim)
        k, v = kv_proj if kv_proj is not None else self.project(y, with_q=False)[1:]
        v = v.view(shp)
        if self.value_scale != 1.0:
            v = v * self.value_scale
        return self.norm_rope(self.k_norm, k.view(shp), pos), v

    def norm_rope(self, norm: RMSNorm | None, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """``rope(norm(x), pos)`` for ``x [..., T, H, D]`` (``rope(x)`` when ``norm`` is None),
        as one kernel on CUDA."""
        if norm is None:
            return self.rope(x, pos)
        if fused.enabled(x):
            out = fused.norm_rope(x, norm.weight, norm.eps, norm.gemma, pos.expand(x.shape[:-2]),
                                  self.rope.inv_freq, self.rope.rotary_dim)
            if self.rope.attention_factor != 1.0:  # YaRN: cos and sin scaled, the pass-through dims not
                out[..., : self.rope.rotary_dim] *= self.rope.attention_factor
            return out
        return self.rope(norm(x), pos)

    def forward(self, y: torch.Tensor, pos: torch.Tensor, cache: PagedKV, mask: MaskSpec, lowering) -> torch.Tensor:
        """``y [N, B, hidden]`` (already input-normed) at ``pos [N, B]`` -> ``o_proj(attn) [N, B, hidden]``."""
        n, b, _ = y.shape
        q, k, v = self.project(y)
        q = self.norm_rope(self.q_norm, q.view(n, b, self.heads, self.head_dim), pos)
        k, v = self.kv(y, pos, (k, v))
        out = lowering(q, cache, k, v, mask, self.scale)
        return self.o_proj(out.reshape(n, b, self.heads * self.head_dim))


class DFlashDecoderLayer(nn.Module):
    """``x += o_proj(attn(input_layernorm(x)))``; ``x += mlp(post_attention_layernorm(x))``.

    With ``conv`` (DFlash 2: ``(conv_kernel_size, conv_group_size)``) each sublayer is wrapped in
    its block convolution (``attention_conv``, ``mlp_conv``: :func:`~.dflash2.layer_forward`) over
    the block rows only; the context K/V path (:meth:`DFlashAttention.kv` of the projected context)
    is not convolved (docs/dflash2-reference.md section 1).
    """

    def __init__(self, s: LayerShape, norms: dict, rope: PartialNeoxRope, conv: Optional[tuple[int, int]] = None):
        super().__init__()
        g = lambda name: norms.get(name, "plain") == "gemma"  # noqa: E731
        self.input_layernorm = RMSNorm(s.hidden, s.eps, g("input_layernorm"))
        self.post_attention_layernorm = RMSNorm(s.hidden, s.eps, g("post_attention_layernorm"))
        self.self_attn = DFlashAttention(s, g("q_norm"), g("k_norm"), rope)
        self.mlp = GatedMLP(s.hidden, s.inter, s.mlp, s.alpha, s.limit, s.mlp_bias)
        self.attention_conv = BlockConv(s.hidden, *conv) if conv else None
        self.mlp_conv = BlockConv(s.hidden, *conv) if conv else None

    def stack_weights(self) -> None:
        """Stack q/k/v and gate/up weights (one GEMM each on CUDA); call before loading."""
        self.self_attn.stack_weights()
        self.mlp.stack_weights()

    def forward(self, x: torch.Tensor, pos: torch.Tensor, cache: PagedKV, mask: MaskSpec, lowering) -> torch.Tensor:
        """``x [N, B, hidden]`` block rows at ``pos [N, B]`` -> ``[N, B, hidden]``."""
        if self.attention_conv is not None:
            n, b, h = x.shape

            def attn(rows: torch.Tensor) -> torch.Tensor:  # [N*B, h] rows, one block per sequence
                return self.self_attn(rows.view(n, b, h), pos, cache, mask, lowering).reshape(n * b, h)

            out = layer_forward(x.reshape(n * b, h), b, attn=attn, mlp=self.mlp, norm_in=self.input_layernorm,
                                norm_post=self.post_attention_layernorm, attention_conv=self.attention_conv,
                                mlp_conv=self.mlp_conv)
            return out.view(n, b, h)
        x = x + self.self_attn(self.input_layernorm(x), pos, cache, mask, lowering)
        return x + self.mlp(self.post_attention_layernorm(x))
