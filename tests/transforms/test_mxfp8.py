"""MXFP8 dequantization against an independent float64 per-block reference."""

import numpy as np
import pytest
import torch

from draftsmith.transforms.base import Binding, Context, TensorMeta, TransformError, get_transform
from draftsmith.transforms.mxfp8 import MXFP8Params


def e4m3_value(byte: int) -> float:
    """OCP E4M3 (fn variant) decoded from its bits: 1 sign, 4 exponent (bias 7), 3 mantissa."""
    s = -1.0 if byte & 0x80 else 1.0
    e = (byte >> 3) & 0xF
    m = byte & 0x7
    if e == 0xF and m == 0x7:
        return float("nan")
    if e == 0:
        return s * (m / 8.0) * 2.0 ** -6
    return s * (1.0 + m / 8.0) * 2.0 ** (e - 7)


E4M3 = np.array([e4m3_value(b) for b in range(256)], dtype=np.float64)


def reference(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float64: w[r, c] = e4m3(codes[r, c]) * 2**(scales[r, c // 32] - 127)."""
    rows, cols = codes.shape
    out = np.empty((rows, cols), dtype=np.float64)
    for r in range(rows):
        for c in range(cols):
            out[r, c] = E4M3[codes[r, c]] * 2.0 ** (int(scales[r, c // 32]) - 127)
    return out


def random_mx(gen, rows, cols, exp_lo, exp_hi):
    codes = torch.randint(0, 256, (rows, cols), generator=gen, dtype=torch.int32).to(torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x11  # no NaN codes
    nb = -(-cols // 32)
    scales = torch.randint(exp_lo, exp_hi + 1, (rows, nb), generator=gen, dtype=torch.int32).to(torch.uint8)
    return codes, scales


def run(codes, scales, scale_dtype=torch.uint8, out_dtype="float32"):
    t = get_transform("dequant_mxfp8")(MXFP8Params(dtype=out_dtype), r".*")
    b = Binding({"weight": "w", "scale": "w_scale_inv"}, ("w",))
    s = scales if scale_dtype == torch.uint8 else scales.view(scale_dtype)
    inputs = {"weight": codes.view(torch.float8_e4m3fn), "scale": s}
    meta = t.meta(b, {k: TensorMeta(tuple(v.shape), v.dtype) for k, v in inputs.items()}, Context({}))
    out = t.forward(b, inputs, Context({}))["w"]
    assert tuple(out.shape) == meta["w"].shape and out.dtype == meta["w"].dtype
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("cols", [32, 96, 70])  # 70: a partial last block
def test_dequant_matches_float64_reference(seed, cols):
    gen = torch.Generator().manual_seed(seed)
    codes, scales = random_mx(gen, 5, cols, 100, 150)
    want = reference(codes.numpy(), scales.numpy())
    got = run(codes, scales).double().numpy()
    np.testing.assert_array_equal(got, want.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize("lo,hi", [(0, 3), (250, 254), (0, 254)])
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
def test_dequant_extreme_exponents(lo, hi, out_dtype):
    gen = torch.Generator().manual_seed(lo * 7 + hi)
    codes, scales = random_mx(gen, 4, 64, lo, hi)
    want = torch.from_numpy(reference(codes.numpy(), scales.numpy()))  # exact in float32
    got = run(codes, scales, out_dtype=out_dtype)
    assert torch.equal(got, want.to(torch.float32).to(got.dtype))


@pytest.mark.skipif(not hasattr(torch, "float8_e8m0fnu"), reason="no float8_e8m0fnu in this torch")
def test_e8m0_scales_equal_uint8_scales():
    gen = torch.Generator().manual_seed(11)
    codes, scales = random_mx(gen, 3, 64, 110, 140)
    a = run(codes, scales)
    b = run(codes, scales, scale_dtype=torch.float8_e8m0fnu)
    assert torch.equal(a, b)


def test_bf16_output_is_rounded_once():
    gen = torch.Generator().manual_seed(5)
    codes, scales = random_mx(gen, 4, 64, 110, 140)
    want = torch.from_numpy(reference(codes.numpy(), scales.numpy())).to(torch.bfloat16)
    assert torch.equal(run(codes, scales, out_dtype="bfloat16"), want)


def test_scale_255_refused():
    gen = torch.Generator().manual_seed(6)
    codes, scales = random_mx(gen, 2, 64, 120, 130)
    scales[1, 1] = 255
    with pytest.raises(TransformError, match="255"):
        run(codes, scales)


@pytest.mark.parametrize("bad", [torch.int8, torch.float32, torch.bfloat16])
def test_other_scale_dtypes_refused(bad):
    t = get_transform("dequant_mxfp8")(MXFP8Params(), r".*")
    b = Binding({"weight": "w", "scale": "w_scale"}, ("w",))
    metas = {"weight": TensorMeta((4, 64), torch.float8_e4m3fn), "scale": TensorMeta((4, 2), bad)}
    with pytest.raises(TransformError, match="w_scale"):
        t.meta(b, metas, Context({}))


def test_scale_shape_must_match():
    t = get_transform("dequant_mxfp8")(MXFP8Params(), r".*")
    b = Binding({"weight": "w", "scale": "w_scale_inv"}, ("w",))
    metas = {"weight": TensorMeta((4, 64), torch.float8_e4m3fn), "scale": TensorMeta((4, 3), torch.uint8)}
    with pytest.raises(TransformError, match="does not match"):
        t.meta(b, metas, Context({}))


def test_chunk_pool_gives_the_same_bits():
    from concurrent.futures import ThreadPoolExecutor

    from draftsmith.transforms.mxfp8 import CHUNK_ELEMENTS, dequantize

    gen = torch.Generator().manual_seed(13)
    rows = 3 * CHUNK_ELEMENTS // 64 + 5  # several chunks and a partial one
    codes, scales = random_mx(gen, rows, 64, 100, 150)
    want = torch.from_numpy(reference(codes[:7].numpy(), scales[:7].numpy())).float().to(torch.bfloat16)
    with ThreadPoolExecutor(2) as pool:
        got = dequantize(codes.view(torch.float8_e4m3fn), scales, torch.bfloat16, pool)
    assert torch.equal(got, dequantize(codes.view(torch.float8_e4m3fn), scales, torch.bfloat16))
    assert torch.equal(got[:7], want)
