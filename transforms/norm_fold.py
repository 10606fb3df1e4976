"""``norm_fold_gemma``: a Gemma RMSNorm weight ``w`` (applied as ``rms(x) * (1 + w)``).

- ``mode: fold``: store ``bf16(1 + float32(w))`` (rounded once) for engines that compute
  the norm plainly as ``rms(x) * w``; the config marks it ``plain``.
- ``mode: keep``: store ``w`` unchanged and mark the norm ``gemma`` in the config (lossless).
"""

from __future__ import annotations

from typing import Literal

from .base import Binding, Context, Params, TensorMeta, Transform, TransformError, register_transform


def gemma_multiplier(w: torch.Tensor) -> torch.Tensor:
    """The factor a Gemma RMSNorm applies, ``1 + w``, in float32 (the one place of this rule;
    the fused Triton kernels in ``framework/runtime/fused.py`` spell it inside the kernel)."""
    import torch
    return 1.0 + w.to(torch.float32)


def fold_gemma(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A Gemma weight ``w`` stored for a plain norm: ``dtype(1 + float32(w))``, rounded once."""
    return gemma_multiplier(w).to(dtype)


def unfold_gemma(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The inverse of :func:`fold_gemma`: ``dtype(float32(y) - 1)``."""
    import torch
    return (y.to(torch.float32) - 1.0).to(dtype)


class NormFoldParams(Params):
    mode: Literal["fold", "keep"]
    """``fold``: write ``1 + w``, engine runs the norm plainly; ``keep``: write ``w``, flag Gemma."""


@register_transform
class NormFoldGemma(Transform):
    name = "norm_fold_gemma"
    elementwise = True
    Params = NormFoldParams

    def meta(self, b: Binding, inputs: dict[str, TensorMeta], ctx: Context) -> dict[str, TensorMeta]:
        x = inputs["x"]
        if len(x.shape) != 1 or not x.dtype.is_floating_point:
            raise TransformError(f"{b.inputs['x']}: a norm weight must be a 1-D float tensor, found {x}")
        return {b.outputs[0]: TensorMeta(x.shape, ctx.dtype)}

    def forward(self, b, inputs, ctx):
        w = inputs["x"]
        if self.params.mode == "keep":
            return {b.outputs[0]: w.to(ctx.dtype)}
        return {b.outputs[0]: fold_gemma(w, ctx.dtype)}

    def inverse(self, b, outputs, ctx):
        y = outputs[b.outputs[0]]
        if self.params.mode == "keep":
            return {b.inputs["x"]: y.clone()}
        return {b.inputs["x"]: unfold_gemma(y, y.dtype)}

    def sample(self, b, out_metas, gen, ctx):
        import torch
        meta = out_metas[b.outputs[0]]
        if self.params.mode == "keep":  # Gemma weights sit near 0
            return {b.outputs[0]: (0.1 * torch.randn(meta.shape, generator=gen)).to(meta.dtype)}
        # folded weights near 1, inside [0.5, 2) where 1 + (y - 1) is exact in bf16
        y = (1.0 + 0.1 * torch.randn(meta.shape, generator=gen)).clamp(0.5, 1.9)
        return {b.outputs[0]: y.to(meta.dtype)}
