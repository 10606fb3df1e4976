"""``lab/variants/block-narrow.patch`` (the block's private tile computed over its own keys, wgmma N /
K = 16, 32 or 64) against the float64 oracle on an SM90 GPU: blocks of 5 to 40 keys (the three widths),
one and two consumers, masks and splits. Cases and oracle are the product kernel tests'
(``kernel_tests.sm90_case``); ``-m gpu``; skipped without an SM90 GPU and triton 3.6's Gluon."""

from pathlib import Path

import pytest

from kernel_tests import CTX, assert_launches, sm90_case, variant_module

ROOT = Path(__file__).resolve().parents[2]
#: (B, Hq, Hkv): packed rows 112 / width 16, 96 / 16, 65 / 16, 64 (one consumer) / 16, 120 / 32, 120 / 64
SHAPES = [(7, 64, 4), (16, 48, 8), (5, 52, 4), (16, 32, 8), (20, 48, 8), (40, 24, 8)]


def test_block_keys_are_the_powers_of_two_wgmma_takes():
    k = variant_module(ROOT / "lab" / "variants" / "block-narrow.patch")
    got = {b: k.block_keys(b, 64) for b in (1, 7, 16, 17, 32, 33, 64)}
    assert got == {1: 16, 7: 16, 16: 16, 17: 32, 32: 32, 33: 64, 64: 64}
    assert k.block_keys(20, 32) == 32  # never past the private buffer's keys


@pytest.mark.gpu
@pytest.mark.parametrize("b,hq,hkv", SHAPES, ids=["rows112", "rows96", "rows65", "rows64", "b20", "b40"])
@pytest.mark.parametrize("causal,window", [(False, 300), (True, 1000), (True, None), (False, 4096)])
@pytest.mark.parametrize("splits", [1, 2, 5])
@pytest.mark.parametrize("page", [32, 64])
def test_gpu_block_narrow(b, hq, hkv, causal, window, splits, page, monkeypatch):
    """The variant's launch (each consumer build at one split) against the float64 oracle; outputs
    NaN until written."""
    t, case, mask, scale = sm90_case(CTX, b, hq, hkv, causal, window, splits, page)
    k = variant_module(ROOT / "lab" / "variants" / "block-narrow.patch")
    assert_launches(t, k, case, mask, scale, causal, window, splits, monkeypatch)
