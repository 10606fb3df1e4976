"""``lab/variants/asm-ring-sync.patch`` (the ring's ``ready`` waits and ``empty`` releases in inline PTX, so
that triton's membar pass puts no warpgroup ``BAR.SYNC`` in the ring loop). Compiled without a GPU
(triton 3.6's Gluon; skipped without it): the barriers' offset the variant computes is where the compiled
kernel initializes them, for every build, and the ring loops hold no 128-thread ``BAR.SYNC``. On an SM90 GPU
(``-m gpu``): the kernel tests' cases against the float64 oracle (packed rows 112, 96, 65, 28 and 64, masks,
splits; ``kernel_tests.sm90_case``)."""

import re
from pathlib import Path

import pytest

from draftsmith.lowering import gluon_window_block as gwb
from kernel_tests import CTX, ROW_SHAPES, assert_launches, sm90_case, variant_module

VARIANT = Path(__file__).resolve().parents[2] / "lab" / "variants" / "asm-ring-sync.patch"
INIT = re.compile(r"add\.s32\s+(%r\d+), %r\d+, (\d+);\s*\n(?:.*\n){0,3}?\s*@%p\d+ mbarrier\.init\.shared::cta\.b64 \[\1\], 1;")


def ready_offset(consumers: int, d: int = 128) -> int:
    """Where the variant assumes the ``ready`` barriers lie at head dim 128 (bytes into shared memory),
    computed here from the buffers as the patch's comment lists them: four 64-key K and V ring slots,
    the private tiles (one K and one V tile a consumer), then ``consumers * 64 * d`` bytes of triton's
    scratch."""
    return (4 + consumers) * 64 * d * 4 + consumers * 64 * d


@pytest.mark.skipif(not gwb.available(), reason="Gluon's Hopper API (triton 3.6) is not installed here")
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("consumers", [1, 2])
@pytest.mark.parametrize("overlap,splits", [(True, 1), (False, 1), (False, 3)])
def test_barrier_offset_and_no_warpgroup_sync(d, consumers, overlap, splits):
    import gluon_compile
    import sass_loops

    if d == 256 and overlap:
        pytest.skip("the overlap build is head dim 128's (default_overlap)")
    kernel = variant_module(VARIANT)
    built = gluon_compile.compile_for_sm90(consumers=consumers, d=d, overlap=overlap, num_splits=splits, page=32,
                                           kernel=kernel)
    if d != 128:  # the variant keeps triton's waits there (its offset unchecked)
        assert "mov.b32 a, global_smem" not in built["ptx"]
        return
    inits = [int(m.group(2)) for m in INIT.finditer(built["ptx"])]
    assert inits and inits[0] == ready_offset(consumers)
    sass = sass_loops.sass_of(built["cubin"])
    found = sass_loops.loops(sass)
    ring = [(s, e) for s, e, ops in found if sum(ops.values()) < 500]  # the ring loops (the masked edge loops: ~760)
    assert ring
    for start, end in ring:
        syncs = [t for t in sass_loops.body(sass, start, end) if t.startswith("BAR.SYNC") and t.endswith("0x80")]
        assert not syncs, (start, end)


@pytest.mark.gpu
@pytest.mark.parametrize("b,hq,hkv", list(ROW_SHAPES.values()), ids=list(ROW_SHAPES))
@pytest.mark.parametrize("causal,window", [(False, 300), (True, None), (False, 4096)])
@pytest.mark.parametrize("splits", [1, 3])
def test_gpu_asm_ring_sync(b, hq, hkv, causal, window, splits, monkeypatch):
    """The variant's launch (each consumer build) against the float64 oracle, on TensorRT-LLM's 32-token
    pages; outputs NaN until written."""
    t, case, mask, scale = sm90_case(CTX, b, hq, hkv, causal, window, splits, 32)
    assert_launches(t, variant_module(VARIANT), case, mask, scale, causal, window, splits, monkeypatch)
