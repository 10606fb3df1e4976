"""The variants that put masked context tiles through the TMA ring (lab/log.md#a30) against the
float64 oracle on an SM90 GPU: ``lab/variants/edge-in-ring.patch`` (the window's leading edge tiles,
V's rows before the window zeroed) and ``all-in-ring.patch`` on top of it (the trailing partial tile
too, private buffers of the block's rows only, six ring slots), and ``all-in-ring-qfirst.patch`` on
top of that (the ring waits for every consumer's Q load), and ``all-in-ring-pairs.patch`` on all-in-ring
(two ring tiles a step in the turns build, its default at two consumers), and
``all-in-ring-pairs-overlap.patch`` on that (two tiles a step in the overlap build too); ``named-release.patch``
(ring slots released on named barriers, not mbarriers) and ``partial-sums.patch`` (the ring's row sums as lane
partials) are run through the same cases. Each is applied to today's kernel at
run time (``timed_kernel.apply``, strictly) and loaded beside the product's (``gluon_ab.kernel_at``);
the cases and the oracle are the product kernel tests' (``tests/lowering/test_triton_window_block.py``),
with NaN wherever the mask cannot reach (so a V row no query may reach that were not zeroed would
reach the output). ``-m gpu``; skipped without an SM90 GPU and Gluon's Hopper API (triton 3.6)."""

from pathlib import Path

import pytest

from kernel_tests import assert_launches, sm90_case, spans, variant_module

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ["edge-in-ring", "all-in-ring", "all-in-ring-qfirst", "all-in-ring-pairs",  # each after its "On top of:" chain
            "all-in-ring-pairs-overlap", "named-release", "rescale-under-qk", "tree-rows", "late-wait", "partial-sums",
            "warp-rescale", "lane-max"]
CTX = [5003, 1000, 299, 130, 64, 0, 4160, 777, 2222, 191, 4127, 70]
SHAPES = [(7, 64, 4), (16, 48, 8), (16, 32, 8), (5, 52, 4), (33, 16, 8), (20, 24, 8)]  # rows 112, 96, 64, 65, 66, 60
MASKS = [(False, 300), (True, 1000), (False, 4096), (True, None), (False, 77)]


def _edges(ctx, b, window, splits=1, bn=64):
    """For each (sequence, split): ``(n_mask, cut)``, the kernel's count of leading masked whole
    tiles in the ring and how many keys of the first one lie before the window (its ``span``)."""
    return [(min(sp.n_pre, sp.n_full), sp.start - sp.lo) for sp in spans(ctx, b, window, splits, bn)]


@pytest.mark.parametrize("b,hq,hkv", SHAPES)
@pytest.mark.parametrize("splits", [1, 2, 5])
def test_cases_reach_masked_ring_tiles_with_keys_before_the_window(b, hq, hkv, splits):
    """The windowed GPU cases below put masked tiles in the ring, some with keys before the window
    (V rows to zero), some two masked tiles long."""
    edges = [e for window in (300, 1000, 4096) for e in _edges(CTX, b, window, splits)]
    assert any(m and cut > 0 for m, cut in edges) and any(m >= 2 for m, _ in edges), edges


def _variant(name):
    return variant_module(ROOT / "lab" / "variants" / f"{name}.patch")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("b,hq,hkv", SHAPES, ids=["rows112", "rows96", "rows64", "rows65", "b33", "b20"])
@pytest.mark.parametrize("causal,window", MASKS)
@pytest.mark.parametrize("splits", [1, 2, 5])
@pytest.mark.parametrize("page", [32, 64])
def test_gpu_edges_in_ring(variant, b, hq, hkv, causal, window, splits, page, monkeypatch):
    """The variant's launch against the float64 oracle: one and two consumers, masked ring tiles with
    and without keys before the window, splits, TensorRT-LLM's 32-token pages (HND) and 64-token ones
    (NHD), NaN wherever the mask cannot reach; outputs NaN until written; the overlap build too at one
    split."""
    t, case, mask, scale = sm90_case(CTX, b, hq, hkv, causal, window, splits, page)
    assert_launches(t, _variant(variant), case, mask, scale, causal, window, splits, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("build", [dict(page=32, overlap=True), dict(page=32, overlap=False, num_splits=2),
                                   dict(page=32, consumers=1, overlap=True), dict(d=256, overlap=False)],
                         ids=["p32-overlap", "p32-split", "p32-one-consumer", "d256"])
def test_variant_assembles_without_serialized_wgmma(variant, build, tmp_path):
    """The variant for sm_90a without a GPU (``test_gluon_ptxas.py``'s check): no ``C7513`` and
    within SM90's shared memory. Spills are not asserted (the patches' headers give them)."""
    import subprocess

    from test_gluon_ptxas import PTXAS
    if PTXAS is None:
        pytest.skip("Gluon's Hopper API (triton 3.6) and its ptxas are not installed here")
    from gluon_compile import compile_for_sm90

    src = tmp_path / "kernel.ptx"
    compiled = compile_for_sm90(**build, kernel=_variant(variant))
    assert compiled["shared"] <= 232_448, compiled["shared"]
    src.write_text(compiled["ptx"])
    done = subprocess.run([str(PTXAS), "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "kernel.cubin")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "C7513" not in done.stderr, done.stderr[-2000:]
