"""``fuse`` and ``split``: concatenate tensors along a dim, or cut one apart (inverses).

Both name their tensors with templates (see :mod:`.names`), e.g. q/k/v into qkv::

    {op: fuse, params: {inputs: ["{l*}.q_proj.weight", "{l*}.k_proj.weight",
     "{l*}.v_proj.weight"], output: "{l*}.qkv_proj.weight", dim: 0}}

``split`` sizes are ints, config keys, or lists of those multiplied
(``[num_key_value_heads, head_dim]``).
"""

from __future__ import annotations


from .base import Binding, Context, Params, TensorMeta, Transform, TransformError, register_transform
from .names import NameTemplate


class FuseParams(Params):
    inputs: list[str]
    """Name templates of the parts, in concatenation order."""
    output: str
    """Name template of the fused tensor (same placeholders)."""
    dim: int = 0
    """Concatenation dim."""
    sizes: list[int | str | list[int | str]] | None = None
    """Part sizes along ``dim`` (as for ``split``); needed only to invert (synthesize)."""


class SplitParams(Params):
    input: str
    """Name template of the fused tensor."""
    outputs: list[str]
    """Name templates of the parts, in order."""
    sizes: list[int | str | list[int | str]]
    """Size of each part along ``dim``: an int, a config key, or a product of those."""
    dim: int = 0
    """Split dim."""


def _bind_many(src: list[NameTemplate], dst: list[NameTemplate], name: str, role: str) -> Binding | None:
    values = src[0].match(name)
    if values is None:
        return None
    ins = {f"{role}{k}": t.format(values) for k, t in enumerate(src)}
    outs = tuple(t.format(values) for t in dst)
    return Binding(ins, outs)


def _sizes_of(metas: list[TensorMeta], dim: int) -> list[int]:
    return [m.shape[dim] for m in metas]


@register_transform
class Fuse(Transform):
    name = "fuse"
    Params = FuseParams

    def __init__(self, params: FuseParams, match: str):
        super().__init__(params, match)
        self.ins = [NameTemplate(t) for t in params.inputs]
        self.out = NameTemplate(params.output)

    def bind(self, name, names):
        return _bind_many(self.ins, [self.out], name, "part")

    def bind_inverse(self, out_name, out_names):
        values = self.out.match(out_name)
        if values is None:
            return None
        return Binding({f"part{k}": t.format(values) for k, t in enumerate(self.ins)}, (out_name,))

    def meta(self, b, inputs, ctx):
        metas = [inputs[f"part{k}"] for k in range(len(self.ins))]
        d = self.params.dim
        base = metas[0]
        for k, m in enumerate(metas):
            if m.dtype != base.dtype or len(m.shape) != len(base.shape) or any(
                a != c for i, (a, c) in enumerate(zip(m.shape, base.shape)) if i != d % len(base.shape)
            ):
                raise TransformError(f"{b.inputs[f'part{k}']}: cannot fuse {m} with {base} along dim {d}")
        shape = list(base.shape)
        shape[d] = sum(_sizes_of(metas, d))
        return {b.outputs[0]: TensorMeta(tuple(shape), base.dtype)}

    def forward(self, b, inputs, ctx):
        import torch
        parts = [inputs[f"part{k}"] for k in range(len(self.ins))]
        return {b.outputs[0]: torch.cat(parts, dim=self.params.dim)}

    def inverse(self, b, outputs, ctx):
        import torch
        if self.params.sizes is None:
            raise TransformError(f"{b.outputs[0]}: fuse needs params.sizes to be inverted (synthesized)")
        sizes = [ctx.size(s) for s in self.params.sizes]
        parts = torch.split(outputs[b.outputs[0]], sizes, dim=self.params.dim)
        return {b.inputs[f"part{k}"]: p.contiguous() for k, p in enumerate(parts)}


@register_transform
class Split(Transform):
    name = "split"
    Params = SplitParams

    def __init__(self, params: SplitParams, match: str):
        super().__init__(params, match)
        self.inp = NameTemplate(params.input)
        self.outs = [NameTemplate(t) for t in params.outputs]
        if len(params.sizes) != len(params.outputs):
            raise ValueError("split: sizes and outputs differ in length")

    def bind(self, name, names):
        return _bind_many([self.inp], self.outs, name, "x")

    def bind_inverse(self, out_name, out_names):
        values = self.outs[0].match(out_name)
        if values is None:
            return None
        return Binding({"x0": self.inp.format(values)}, tuple(t.format(values) for t in self.outs))

    def _sizes(self, ctx: Context) -> list[int]:
        return [ctx.size(s) for s in self.params.sizes]

    def meta(self, b, inputs, ctx):
        x = inputs["x0"]
        d = self.params.dim
        sizes = self._sizes(ctx)
        if len(x.shape) == 0 or x.shape[d] != sum(sizes):
            raise TransformError(f"{b.inputs['x0']}: cannot split {x} along dim {d} into {sizes}")
        out = {}
        for name, s in zip(b.outputs, sizes):
            shape = list(x.shape)
            shape[d] = s
            out[name] = TensorMeta(tuple(shape), x.dtype)
        return out

    def forward(self, b, inputs, ctx):
        import torch
        parts = torch.split(inputs["x0"], self._sizes(ctx), dim=self.params.dim)
        return {n: p.contiguous() for n, p in zip(b.outputs, parts)}

    def inverse(self, b, outputs, ctx):
        import torch
        return {b.inputs["x0"]: torch.cat([outputs[n] for n in b.outputs], dim=self.params.dim)}
