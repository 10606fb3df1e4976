"""``lab/variants/zero-pad-rows.patch`` and ``zero-pad-rows-lm.patch`` (the padding rows' maximum starts
at +1e30, so their P is 0)
against the float64 oracle on an SM90 GPU: packed rows 112, 96 and 65 (two consumers, one to three
padding-only warps), 28 (one consumer, two padding-only warps) and 64 (none), masks and splits; and the
same patch on top of ``wide-block-narrow.patch`` (the wide build with shared private buffers and the
narrow block tile) on the same cases at two consumers.
Cases and oracle are the product kernel tests' (``kernel_tests.sm90_case``); ``-m gpu``; skipped
without an SM90 GPU."""

from pathlib import Path

import pytest

from kernel_tests import CTX, MASKS, ROW_SHAPES, assert_launches, sm90_case, variant_module

VARIANTS = Path(__file__).resolve().parents[2] / "lab" / "variants"
#: the switches of the wide build under ``wide-block-narrow.patch``
WIDE = ("WIDE_KV", "WIDE_Q_SMEM", "WIDE_SHARED_PRIVATE", "WIDE_BLOCK_NARROW")


@pytest.mark.gpu
@pytest.mark.parametrize("b,hq,hkv", list(ROW_SHAPES.values()), ids=list(ROW_SHAPES))
@pytest.mark.parametrize("causal,window", MASKS)
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("variant", ["zero-pad-rows.patch", "zero-pad-rows-lm.patch"])
def test_gpu_padding_rows(variant, b, hq, hkv, causal, window, splits, monkeypatch):
    """The variant's launch (each consumer build at one split) against the float64 oracle, on
    TensorRT-LLM's 32-token pages; outputs NaN until written (``-lm``: on the lane-max ring's kernel)."""
    t, case, mask, scale = sm90_case(CTX, b, hq, hkv, causal, window, splits, 32)
    k = variant_module(VARIANTS / variant)
    assert_launches(t, k, case, mask, scale, causal, window, splits, monkeypatch)


#: the shapes above with two consumers: the wide build's shared memory fits no other
TWO_CONSUMERS = {k: v for k, v in ROW_SHAPES.items() if v[0] * (v[1] // v[2]) > 64}


@pytest.mark.gpu
@pytest.mark.parametrize("b,hq,hkv", list(TWO_CONSUMERS.values()), ids=list(TWO_CONSUMERS))
@pytest.mark.parametrize("causal,window", MASKS)
@pytest.mark.parametrize("splits", [1, 3])
def test_gpu_padding_rows_wide(b, hq, hkv, causal, window, splits, monkeypatch):
    """``launch(wide=True)`` of the two stacked against the float64 oracle, as above."""
    t, case, mask, scale = sm90_case(CTX, b, hq, hkv, causal, window, splits, 32)
    k = variant_module(VARIANTS / "zero-pad-rows.patch", WIDE, base=VARIANTS / "wide-block-narrow.patch")
    assert k.wide_fits(2, 128)
    assert_launches(t, k, case, mask, scale, causal, window, splits, monkeypatch, wide=True)
