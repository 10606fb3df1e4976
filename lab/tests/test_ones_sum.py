"""``lab/variants/ones-sum.patch`` (the ring's row sums as P @ ones on the tensor cores) against the
float64 oracle on an SM90 GPU: packed rows 112, 96 and 65 (two consumers), 28 and 64 (one), masks and
splits (the overlap ring at one split, the plain one at both). Cases and oracle are the product kernel
tests' (``kernel_tests.sm90_case``); ``-m gpu``; skipped without an SM90 GPU."""

from pathlib import Path

import pytest

from kernel_tests import CTX, MASKS, ROW_SHAPES, assert_launches, sm90_case, variant_module

VARIANT = Path(__file__).resolve().parents[2] / "lab" / "variants" / "ones-sum.patch"


@pytest.mark.gpu
@pytest.mark.parametrize("b,hq,hkv", list(ROW_SHAPES.values()), ids=list(ROW_SHAPES))
@pytest.mark.parametrize("causal,window", MASKS)
@pytest.mark.parametrize("splits", [1, 3])
def test_gpu_ones_sum(b, hq, hkv, causal, window, splits, monkeypatch):
    """The variant's launch (each consumer build at one split) against the float64 oracle, on
    TensorRT-LLM's 32-token pages; outputs NaN until written."""
    t, case, mask, scale = sm90_case(CTX, b, hq, hkv, causal, window, splits, 32)
    assert_launches(t, variant_module(VARIANT), case, mask, scale, causal, window, splits, monkeypatch)
