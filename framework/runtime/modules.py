"""Building blocks of the GQA DFlash/DSpark drafter (drafter reference, section 1).

Every block computes its nonlinear parts in float32 and returns the input dtype. On CUDA
the same math runs as fused Triton kernels (:mod:`.fused`); the code here is the reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...transforms.norm_fold import gemma_multiplier
from . import fused
from .rope import rope_frequencies


class RMSNorm(nn.Module):
    """``rms(x) * w`` (``gemma=False``) or ``rms(x) * (1 + w)`` (``gemma=True``, ``1 + w`` in fp32).

    ``rms(x) = x / sqrt(mean(x^2) + eps)`` over the last dim ``dim``; weight ``[dim]``.
    """

    def __init__(self, dim: int, eps: float, gemma: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.eps = eps
        self.gemma = gemma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if fused.enabled(x):
            return fused.rms_norm(x, self.weight, self.eps, self.gemma)
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        w = gemma_multiplier(self.weight) if self.gemma else self.weight.float()
        return (xf * w).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, gemma={self.gemma}"


class PartialNeoxRope:
    """NeoX rotary embedding (rotate halves) on the first ``rotary_dim`` dims of each head.

    ``rope(x [..., T, H, D], pos [..., T] int) -> [..., T, H, D]``; dims ``rotary_dim..D-1``
    pass through. Angles ``pos * inv_freq`` are formed in float64 (exact for long contexts),
    cos/sin applied in float32. ``rope_type``/``scaling``: the drafter's RoPE scaling
    (``runtime/rope.py``); ``attention_factor`` multiplies cos and sin (YaRN). Holds no
    parameters (shared by all layers). ``head_dim``, ``rotary_dim``: the record's (its ``Dims``
    checks that ``rotary_dim`` is even and in ``1..head_dim``).
    """

    def __init__(self, head_dim: int, rotary_dim: int, theta: float, device: torch.device | str = "cpu",
                 rope_type: str = "default", scaling: dict | None = None):
        self.rotary_dim = rotary_dim
        self.theta = float(theta)
        inv_freq, self.attention_factor = rope_frequencies(self.theta, rotary_dim, rope_type, scaling or {})
        self.inv_freq = inv_freq.to(device)

    def cos_sin(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin ``[..., T, 1, rotary_dim/2]`` float32 for integer positions ``pos [..., T]``
        (times the attention factor)."""
        ang = pos.to(torch.float64).unsqueeze(-1) * self.inv_freq
        m = self.attention_factor
        return (ang.cos() * m).float().unsqueeze(-2), (ang.sin() * m).float().unsqueeze(-2)

    def __call__(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_sin(pos)
        r, half = self.rotary_dim, self.rotary_dim // 2
        xf = x.float()
        x1, x2, rest = xf[..., :half], xf[..., half:r], xf[..., r:]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)
        return out.to(x.dtype)


def share_rows(*linears: nn.Linear) -> torch.Tensor:
    """Re-point the weights of ``linears`` (same in-features, no bias) at consecutive row blocks
    of one new ``[sum(out), in]`` tensor, returned: one GEMM then computes all of them. The
    parameters keep their names and shapes (loading copies into them in place); their
    values are not kept, so call this before loading."""
    w0 = linears[0].weight
    stacked = torch.empty(sum(l.weight.shape[0] for l in linears), w0.shape[1], dtype=w0.dtype, device=w0.device)
    off = 0
    for l in linears:
        rows = l.weight.shape[0]
        l.weight = nn.Parameter(stacked[off:off + rows], requires_grad=l.weight.requires_grad)
        off += rows
    return stacked


def stacked_weight(stacked, *linears: nn.Linear):
    """``stacked`` if the weights of ``linears`` are still its consecutive row blocks (they stop
    being after, e.g., ``module.to(other_dtype)``), else ``None``."""
    if stacked is None:
        return None
    off = 0
    for l in linears:
        w = l.weight
        if (w.dtype != stacked.dtype or w.device != stacked.device or w.shape[1] != stacked.shape[1]
                or w.data_ptr() != stacked.data_ptr() + off * stacked.stride(0) * stacked.element_size()):
            return None
        off += w.shape[0]
    return stacked if off == stacked.shape[0] else None


class GatedMLP(nn.Module):
    """``down(act(gate(y), up(y)))`` with ``act`` one of:

    - ``swiglu``: ``silu(g) * u``;
    - ``swiglu_oai``: ``g = g.clamp(max=limit)``, ``u = u.clamp(-limit, limit)``,
      ``g * sigmoid(alpha * g) * (u + 1)``.
    Weights ``gate_proj``/``up_proj`` ``[inter, hidden]``, ``down_proj`` ``[hidden, inter]``; each
    with a bias when ``bias`` (``mlp_bias``).
    """

    def __init__(self, hidden: int, inter: int, kind: str, alpha: float, limit: float, bias: bool = False):
        super().__init__()
        if kind not in ("swiglu", "swiglu_oai"):
            raise ValueError(f"unknown MLP kind {kind!r}; known: swiglu, swiglu_oai")
        self.gate_proj = nn.Linear(hidden, inter, bias=bias)
        self.up_proj = nn.Linear(hidden, inter, bias=bias)
        self.down_proj = nn.Linear(inter, hidden, bias=bias)
        self.kind, self.alpha, self.limit = kind, float(alpha), float(limit)
        self.gate_up = None  # set by stack_weights()

    def stack_weights(self) -> None:
        """gate_proj and up_proj as row blocks of one weight (one GEMM on CUDA); before loading.
        With biases they stay separate (each ``nn.Linear`` adds its own)."""
        if self.gate_proj.bias is None:
            self.gate_up = share_rows(self.gate_proj, self.up_proj)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        if fused.enabled(y):
            w = stacked_weight(self.gate_up, self.gate_proj, self.up_proj)
            if w is None:
                g, u = self.gate_proj(y), self.up_proj(y)
            else:
                gu = F.linear(y, w)
                g, u = gu.split(self.gate_proj.weight.shape[0], dim=-1)
            return self.down_proj(fused.gated_act(g, u, self.kind, self.alpha, self.limit))
        g = self.gate_proj(y).float()
        u = self.up_proj(y).float()
        if self.kind == "swiglu":
            a = F.silu(g) * u
        else:
            g = g.clamp(max=self.limit)
            u = u.clamp(-self.limit, self.limit)
            a = g * torch.sigmoid(self.alpha * g) * (u + 1.0)
        return self.down_proj(a.to(y.dtype))
