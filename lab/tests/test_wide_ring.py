"""The wide build (``lab/variants/wide-ring.patch``: 128-key ring tiles in two slots for two
consumers, lab/log.md#a24) against the float64 oracle on an SM90 GPU, and its ptxas report
without one. The variant is applied to today's kernel at run time (``timed_kernel.apply``,
strictly) and loaded beside the product's (``gluon_ab.kernel_at``), once as patched (K and V of
a slot on one barrier), once with ``WIDE_KV = True`` (each on its own) and once more with
``wide-ring-kfirst.patch`` on top (K of ring tile s loaded before V of tile s - 1); the cases and the
oracle are the product kernel tests' (``tests/lowering/test_triton_window_block.py``).
``-m gpu``; skipped without an SM90 GPU and Gluon's Hopper API (triton 3.6)."""

from pathlib import Path

import pytest

from kernel_tests import assert_launches, sm90_case, spans, variant_module

ROOT = Path(__file__).resolve().parents[2]
VARIANT = ROOT / "lab" / "variants" / "wide-ring.patch"
KFIRST = ROOT / "lab" / "variants" / "wide-ring-kfirst.patch"  # on top of VARIANT: K of tile s before V of s - 1
STORE = ROOT / "lab" / "variants" / "wide-store.patch"  # on top of VARIANT: the output through Q's shared buffer
DEEPK = ROOT / "lab" / "variants" / "wide-deep-k.patch"  # on top of STORE: shared private buffers, a deeper K ring
NARROW = ROOT / "lab" / "variants" / "wide-block-narrow.patch"  # on top of DEEPK: the block's tile at wgmma N = 16
SUMS = ROOT / "lab" / "variants" / "wide-partial-sums.patch"  # on top of NARROW: the ring's row sums as lane partials
WARP = ROOT / "lab" / "variants" / "wide-warp-rescale.patch"  # on top of SUMS: the rescale skipped a warp at a time
#: the builds tested: (the switches set True, the variant patch with the ones it applies on top of)
BUILDS = {"kv1": ((), VARIANT), "kv2": (("WIDE_KV",), VARIANT), "kv2-kfirst": (("WIDE_KV",), KFIRST),
          "kv2-q": (("WIDE_KV", "WIDE_Q_SMEM"), VARIANT), "kv2-q-store": (("WIDE_KV", "WIDE_Q_SMEM"), STORE),
          "kv2-q-share": (("WIDE_KV", "WIDE_Q_SMEM", "WIDE_SHARED_PRIVATE"), DEEPK),
          "kv2-q-share-deepk": (("WIDE_KV", "WIDE_Q_SMEM", "WIDE_SHARED_PRIVATE", "WIDE_K_DEEP"), DEEPK),
          "kv2-q-share-deepv": (("WIDE_KV", "WIDE_Q_SMEM", "WIDE_SHARED_PRIVATE", "WIDE_V_DEEP"), DEEPK),
          "kv2-q-share-rows": (("WIDE_KV", "WIDE_Q_SMEM", "WIDE_SHARED_PRIVATE", "WIDE_ROWS_FIRST"), DEEPK),
          "kv2-q-share-rows-deepk": (("WIDE_KV", "WIDE_Q_SMEM", "WIDE_SHARED_PRIVATE", "WIDE_ROWS_FIRST", "WIDE_K_DEEP"),
                                     DEEPK),
          "kv2-q-share-narrow": (("WIDE_KV", "WIDE_Q_SMEM", "WIDE_SHARED_PRIVATE", "WIDE_BLOCK_NARROW"), NARROW),
          "kv2-q-share-narrow-sums": (("WIDE_KV", "WIDE_Q_SMEM", "WIDE_SHARED_PRIVATE", "WIDE_BLOCK_NARROW"), SUMS),
          "kv2-q-share-narrow-sums-wr": (("WIDE_KV", "WIDE_Q_SMEM", "WIDE_SHARED_PRIVATE", "WIDE_BLOCK_NARROW"), WARP)}


def _interior_counts(ctx, b, window, splits=1, bn=64):
    """The kernel's count of unmasked interior ``bn``-key tiles of each (sequence, split) (its
    ``span``, one KV head): what the wide build cuts into 128-key ring tiles and, when odd, a
    half tile first."""
    return [max(sp.n_pre, sp.n_full) - sp.n_pre for sp in spans(ctx, b, window, splits, bn)]


CTX = [5003, 1000, 299, 130, 64, 0, 4160, 777, 2222, 191]
SHAPES = [(7, 64, 4), (13, 40, 8), (16, 32, 4), (5, 52, 4)]  # packed rows 112, 65, 128, 65
MASKS = [(False, 300), (True, 1000), (False, 4096), (True, None)]


@pytest.mark.parametrize("b,hq,hkv", SHAPES)
@pytest.mark.parametrize("causal,window", MASKS)
@pytest.mark.parametrize("splits", [1, 2, 5])
def test_cases_hold_odd_and_even_interior_counts(b, hq, hkv, causal, window, splits):
    """Every GPU case below has (sequence, split)s with an odd count of 64-key interior tiles
    (a half tile first) and with a nonzero even one."""
    counts = _interior_counts(CTX, b, window, splits)
    assert any(c % 2 for c in counts) and any(c and c % 2 == 0 for c in counts), counts


def _variant(switches: tuple = (), patch: Path = VARIANT):
    """The kernel module patched by ``patch`` (after the variants it applies on top of), each of
    ``switches`` (e.g. ``WIDE_KV``) set True."""
    return variant_module(patch, switches)


@pytest.mark.gpu
@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize("b,hq,hkv", SHAPES, ids=["rows112", "rows65", "rows128", "rows65g13"])
@pytest.mark.parametrize("causal,window", MASKS)
@pytest.mark.parametrize("splits", [1, 2, 5])
@pytest.mark.parametrize("page", [32, 64])
def test_gpu_wide_build(build, b, hq, hkv, causal, window, splits, page, monkeypatch):
    """``launch(wide=True)`` against the float64 oracle: 65-128 packed rows (two consumers),
    odd and even counts of 64-key interior tiles, 0-1 and many ring tiles, window edges cut
    inside a tile, splits, TensorRT-LLM's 32-token pages (four TMA boxes a ring tile, HND) and
    64-token ones (NHD), NaN wherever the mask cannot reach; every output the launch allocates
    is NaN until written; the overlap build too at one split."""
    t, case, mask, scale = sm90_case(CTX, b, hq, hkv, causal, window, splits, page)
    wide = _variant(*BUILDS[build])
    assert wide.wide_fits(2 if b * (hq // hkv) > wide.TILE else 1, 128)
    assert_launches(t, wide, case, mask, scale, causal, window, splits, monkeypatch, wide=True)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(BUILDS))
@pytest.mark.parametrize("build", [dict(page=32, overlap=True), dict(page=32, overlap=False, num_splits=2),
                                   dict(page=64, overlap=True)], ids=["p32-overlap", "p32-split", "p64-overlap"])
def test_wide_build_assembles_without_serialized_wgmma(variant, build, tmp_path):
    """The wide build for sm_90a without a GPU (``test_gluon_ptxas.py``'s check): no ``C7513``.
    Spills are not asserted: the builds spill 24-36 bytes (lab/log.md#a24)."""
    import subprocess

    from test_gluon_ptxas import PTXAS
    if PTXAS is None:
        pytest.skip("Gluon's Hopper API (triton 3.6) and its ptxas are not installed here")
    from gluon_compile import compile_for_sm90

    src = tmp_path / "kernel.ptx"
    src.write_text(compile_for_sm90(**build, wide=True, kernel=_variant(*BUILDS[variant]))["ptx"])
    done = subprocess.run([str(PTXAS), "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "kernel.cubin")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "C7513" not in done.stderr, done.stderr[-2000:]
