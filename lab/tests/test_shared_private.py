"""``lab/variants/shared-private.patch`` with ``SHARED_PRIVATE`` on (two consumers' private tiles in
one buffer pair, each consumer copying half its keys, lab/log.md#a35) against the float64 oracle on an
SM90 GPU, with four and five ring slots, and at one consumer (its two pairs, read as "one consumer").
Cases and oracle are the product kernel tests' (``kernel_tests.sm90_case``); ``-m gpu``; skipped
without an SM90 GPU and triton 3.6's Gluon."""

from pathlib import Path

import pytest

from kernel_tests import CTX, assert_launches, sm90_case, variant_module

ROOT = Path(__file__).resolve().parents[2]
#: (ring slots, (B, Hq, Hkv)): packed rows 112, 96, 65 (two consumers) at four and five slots, 64 (one
#: consumer, whose two pairs leave no room for a fifth slot) at four
BUILDS = [(4, (7, 64, 4)), (4, (16, 48, 8)), (4, (13, 40, 8)), (4, (16, 32, 8)),
          (5, (7, 64, 4)), (5, (16, 48, 8)), (5, (13, 40, 8))]


@pytest.mark.gpu
@pytest.mark.parametrize("num_buf,shape", BUILDS, ids=["s4-rows112", "s4-rows96", "s4-rows65", "s4-rows64",
                                                      "s5-rows112", "s5-rows96", "s5-rows65"])
@pytest.mark.parametrize("causal,window", [(False, 300), (True, 1000), (True, None), (False, 4096)])
@pytest.mark.parametrize("splits", [1, 2, 5])
@pytest.mark.parametrize("page", [32, 64])
def test_gpu_shared_private(num_buf, shape, causal, window, splits, page, monkeypatch):
    """The variant's launch (each consumer build at one split) against the float64 oracle; outputs
    NaN until written."""
    b, hq, hkv = shape
    t, case, mask, scale = sm90_case(CTX, b, hq, hkv, causal, window, splits, page)
    k = variant_module(ROOT / "lab" / "variants" / "shared-private.patch", ("SHARED_PRIVATE",))
    assert_launches(t, k, case, mask, scale, causal, window, splits, monkeypatch, num_buf=num_buf)
