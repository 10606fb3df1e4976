"""``cast``: change a floating tensor's dtype (``dtype``, default the config's torch_dtype)."""

from __future__ import annotations

from .base import (Binding, Context, DtypeName, Params, TensorMeta, Transform, TransformError, dtype_from_name,
                   register_transform)


class CastParams(Params):
    dtype: DtypeName = None
    """Target dtype; None = the config's torch_dtype."""
    synth_dtype: DtypeName = None
    """Source dtype written by synthetic checkpoints; None = same as the target."""


@register_transform
class Cast(Transform):
    name = "cast"
    elementwise = True
    Params = CastParams

    def _dtype(self, ctx: Context) -> torch.dtype:
        return dtype_from_name(self.params.dtype) if self.params.dtype else ctx.dtype

    def meta(self, b: Binding, inputs: dict[str, TensorMeta], ctx: Context) -> dict[str, TensorMeta]:
        import torch
        x = inputs["x"]
        if not x.dtype.is_floating_point or x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            raise TransformError(f"{b.inputs['x']}: cast takes a float16/bfloat16/float32 tensor, found {x}")
        return {b.outputs[0]: TensorMeta(x.shape, self._dtype(ctx))}

    def forward(self, b, inputs, ctx):
        return {b.outputs[0]: inputs["x"].to(self._dtype(ctx))}

    def inverse(self, b, outputs, ctx):
        y = outputs[b.outputs[0]]
        src = dtype_from_name(self.params.synth_dtype) if self.params.synth_dtype else y.dtype
        return {b.inputs["x"]: y.to(src)}
