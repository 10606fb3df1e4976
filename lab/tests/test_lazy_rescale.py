"""``lab/variants/lazy-rescale.patch`` (the accumulator's rescale skipped while no row's reference
moves by more than its slack, lab/log.md#a32), ``warp-rescale.patch`` (the same skip decided by
each warp for its own rows) and ``lane-max.patch`` (the row maximum's shuffles skipped with it)
against the float64 oracle on an SM90 GPU, with K scaled so that a row's maximum passes its
reference by more than the slack in later tiles too (the rescale taken mid-ring), and unscaled
(mostly skipped). Cases and oracle are the product kernel
tests' (``kernel_tests.sm90_case``); ``-m gpu``; skipped without an SM90 GPU and triton 3.6's Gluon."""

from pathlib import Path

import pytest

from kernel_tests import CTX, MASKS, ROW_SHAPES, assert_launches, sm90_case, variant_module

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ("rows112", "rows96", "rows64")  # of ROW_SHAPES


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["lazy-rescale", "warp-rescale", "lane-max"])
@pytest.mark.parametrize("k_scale", [1.0, 24.0])
@pytest.mark.parametrize("b,hq,hkv", [ROW_SHAPES[k] for k in SHAPES], ids=SHAPES)
@pytest.mark.parametrize("causal,window", MASKS)
@pytest.mark.parametrize("splits", [1, 2])
def test_gpu_lazy_rescale(variant, k_scale, b, hq, hkv, causal, window, splits, monkeypatch):
    """The variant's launch (each consumer build at one split) against the float64 oracle; outputs
    NaN until written. At ``k_scale`` 24 the scores spread over tens of log2 units, so references
    move after the first ring tile (the spread asserted on the inputs)."""
    t, case, mask, scale = sm90_case(CTX, b, hq, hkv, causal, window, splits, 32)
    q, cache, kb, vb = case
    cache.k_pages.mul_(k_scale)  # NaN where unreachable stays NaN
    kb.mul_(k_scale)
    if k_scale > 1:  # log2-unit scores of sequence 0's first head over its pages' keys: spread so wide
        # (std > 10) that the maximum of 4 096 keys passes the first 64 keys' by more than the slack (8)
        keys = cache.k_pages[cache.block_table[0].long()][:, :, 0].reshape(-1, q.shape[-1]).double()
        s = (keys @ q[0, 0, 0].double()) * scale / 0.6931471805599453
        assert s[~s.isnan()].std().item() > 10
    k = variant_module(ROOT / "lab" / "variants" / f"{variant}.patch")
    assert_launches(t, k, case, mask, scale, causal, window, splits, monkeypatch)
