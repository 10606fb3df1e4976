"""``dequant_mxfp8``: OCP MX FP8 (E4M3 elements, one UE8M0 scale per 32 along the last dim).

Value: ``w = float(e4m3) * 2**(e - 127)`` for scale byte ``e``; ``e == 255`` is NaN and is
refused. Scales come as ``uint8`` or ``float8_e8m0fnu`` in a companion tensor named
``<weight>_scale_inv`` or ``<weight>_scale`` (releases differ); other scale dtypes are
refused. Output dtype: the config's ``torch_dtype`` unless ``dtype`` is given.
"""

from __future__ import annotations

from typing import Literal


from .base import (
    Binding,
    Context,
    DtypeName,
    Params,
    TensorMeta,
    Transform,
    TransformError,
    dtype_from_name,
    register_transform,
    torch_tables,
)

BLOCK = 32
SCALE_DTYPES = ("U8", "F8_E8M0")  # safetensors names; F8_E8M0 where torch has it
E4M3_MAX = 448.0
CHUNK_ELEMENTS = 1 << 19  # rows per step in dequantize: about 1 MiB of bf16


class MXFP8Params(Params):
    scale_suffixes: list[str] = ["_scale_inv", "_scale"]
    """Companion scale names, tried in order, appended to the weight's name."""
    dtype: DtypeName = None
    """Output dtype; None = the config's torch_dtype."""
    synth_scale_suffix: str = "_scale_inv"
    """Which spelling synthetic checkpoints write."""
    synth_scale_dtype: Literal["uint8", "float8_e8m0fnu"] = "uint8"
    """Which scale dtype synthetic checkpoints write."""


def dequantize(weight: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, pool=None) -> torch.Tensor:
    """MXFP8 -> ``dtype``. ``weight`` ``[..., K]`` float8_e4m3fn, ``scale`` ``[..., ceil(K/32)]``.

    ``float(e4m3) * 2**(e-127)`` is exact in float32 for every ``e`` in 0..254 (4
    significant bits, smallest magnitude ``2**-136``), so the only rounding is to ``dtype``.
    Rows are processed in cache-sized chunks (on ``pool``'s threads when given); for
    bfloat16/float32 the product is formed directly in the output dtype (a power-of-two
    scale multiplies exactly, rounding once).
    """
    import torch
    e = scale.view(torch.uint8)
    if bool((e == 255).any()):
        raise TransformError("scale byte 255 (NaN in UE8M0)")
    k = weight.shape[-1]
    # 2**(e - 127), exact in float32 (torch.ldexp(1, x) is 1 * torch.pow(2, x))
    mult = torch.pow(2.0, e.to(torch.float32) - 127.0)
    if k % BLOCK or dtype not in (torch.bfloat16, torch.float32):  # general path
        mult = mult.repeat_interleave(BLOCK, dim=-1)[..., :k]
        return (weight.to(torch.float32) * mult).to(dtype)
    w3 = weight.reshape(-1, k // BLOCK, BLOCK)
    m3 = mult.to(dtype).reshape(-1, k // BLOCK, 1)
    step = max(1, CHUNK_ELEMENTS // k)
    if w3.shape[0] <= step:  # one chunk: convert and scale in place, no thread hand-off
        return w3.to(dtype).mul_(m3).reshape(weight.shape)
    out = torch.empty(w3.shape, dtype=dtype)

    def chunk(r: int) -> None:
        out[r : r + step].copy_(w3[r : r + step]).mul_(m3[r : r + step])

    starts = range(0, w3.shape[0], step)
    if pool is None:
        for r in starts:
            chunk(r)
    else:
        list(pool.map(chunk, starts))
    return out.reshape(weight.shape)


def quantize(w: torch.Tensor, scale_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Right inverse of :func:`dequantize`: per block the smallest exponent that fits 448."""
    import torch
    k = w.shape[-1]
    nb = -(-k // BLOCK)
    wf = w.to(torch.float32)
    pad = torch.nn.functional.pad(wf, (0, nb * BLOCK - k)).reshape(*w.shape[:-1], nb, BLOCK)
    amax = pad.abs().amax(dim=-1)
    # smallest e with amax / 2**(e-127) <= 448
    e = torch.ceil(torch.log2(amax / E4M3_MAX)).nan_to_num(0.0, neginf=-127.0) + 127
    e = e.clamp(0, 254).to(torch.int32)
    mult = torch.ldexp(torch.ones((), dtype=torch.float32), (e - 127).to(torch.float32))
    codes = (pad / mult.unsqueeze(-1)).reshape(*w.shape[:-1], nb * BLOCK)[..., :k]
    q = codes.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    scale = e.to(torch.uint8)
    if scale_dtype != torch.uint8:
        scale = scale.view(scale_dtype)
    return q, scale


@register_transform
class DequantMXFP8(Transform):
    name = "dequant_mxfp8"
    elementwise = True
    Params = MXFP8Params
    quant_method = "mxfp8"

    def bind(self, name: str, names: set[str]) -> Binding | None:
        if not self.match.test(name) or any(name.endswith(s) for s in self.params.scale_suffixes):
            return None
        for suffix in self.params.scale_suffixes:
            if name + suffix in names:
                return Binding({"weight": name, "scale": name + suffix}, (name,))
        # no scale: still bound, so that the plan reports the missing scale by name
        return Binding({"weight": name, "scale": name + self.params.scale_suffixes[0]}, (name,))

    def bind_inverse(self, out_name: str, out_names: set[str]) -> Binding | None:
        if not self.match.search(out_name):
            return None
        return Binding({"weight": out_name, "scale": out_name + self.params.synth_scale_suffix}, (out_name,))

    def out_dtype(self, ctx: Context) -> torch.dtype:
        return dtype_from_name(self.params.dtype) if self.params.dtype else ctx.dtype

    def meta(self, b: Binding, inputs: dict[str, TensorMeta], ctx: Context) -> dict[str, TensorMeta]:
        import torch
        w, s = inputs["weight"], inputs["scale"]
        wn, sn = b.inputs["weight"], b.inputs["scale"]
        if w.dtype != torch.float8_e4m3fn:
            raise TransformError(f"{wn}: MXFP8 weight must be F8_E4M3, found {w}")
        st = torch_tables()["ST_TO_TORCH"]
        if s.dtype not in [st[n] for n in SCALE_DTYPES if n in st]:
            raise TransformError(f"{sn}: MXFP8 scale must be U8 or F8_E8M0, found {s}")
        if len(w.shape) < 1:
            raise TransformError(f"{wn}: MXFP8 weight must have at least one dim")
        want = (*w.shape[:-1], -(-w.shape[-1] // BLOCK))
        if tuple(s.shape) != want:
            raise TransformError(f"{sn}: scale shape {list(s.shape)} does not match weight {list(w.shape)} (want {list(want)})")
        return {b.outputs[0]: TensorMeta(w.shape, self.out_dtype(ctx))}

    def forward(self, b, inputs, ctx):
        try:
            return {b.outputs[0]: dequantize(inputs["weight"], inputs["scale"], self.out_dtype(ctx), ctx.pool)}
        except TransformError as e:
            raise TransformError(f"{b.inputs['scale']}: {e}") from None

    def inverse(self, b, outputs, ctx):
        import torch
        q, s = quantize(outputs[b.outputs[0]], getattr(torch, self.params.synth_scale_dtype))
        return {b.inputs["weight"]: q, b.inputs["scale"]: s}

    def sample(self, b, out_metas, gen, ctx):
        import torch
        meta = out_metas[b.outputs[0]]
        w = torch.randn(meta.shape, generator=gen) * float(meta.shape[-1]) ** -0.5  # unit-RMS activations
        q, s = quantize(w, torch.uint8)
        return {b.outputs[0]: dequantize(q, s, meta.dtype)}
