"""The product kernel tests' module (``tests/lowering/test_triton_window_block.py``), imported
by path so that a lab test run on its own finds its helpers (cases, poisoning, the oracle check)."""

import importlib.util
import sys
from collections import namedtuple
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = "lab_kernel_tests"


def kernel_tests():
    """The module, imported once (``tests/`` on ``sys.path`` for its own imports)."""
    if NAME not in sys.modules:
        for folder in (ROOT / "tests", ROOT):
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
        spec = importlib.util.spec_from_file_location(NAME, ROOT / "tests" / "lowering" / "test_triton_window_block.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[NAME] = module
        spec.loader.exec_module(module)
    return sys.modules[NAME]


#: context lengths of a variant's GPU cases: a ring longer than the window, short rings, one tile, none, a
#: window's edge, a partial last tile
CTX = [5003, 1000, 299, 130, 64, 0, 4160, 777]

#: ``(B, Hq, Hkv)`` by id: packed rows 112, 96 and 65 (two consumers, one to three padding-only warps), 28 (one
#: consumer, two padding-only warps) and 64 (none)
ROW_SHAPES = {"rows112": (7, 64, 4), "rows96": (16, 48, 8), "rows65": (5, 52, 4), "rows28": (7, 32, 8),
              "rows64": (16, 32, 8)}
#: ``(causal, window)`` of a variant's GPU cases: a window shorter than a ring, causal, the kinds' window
MASKS = [(False, 300), (True, None), (False, 4096)]

Span = namedtuple("Span", "start lo n_tiles n_full n_pre")


def spans(ctx, b, window, splits=1, bn=64):
    """The kernel's ``span`` of each (sequence, split), one KV head, recomputed here: the window's
    first key, the split's first key, its ``bn``-key tiles, the whole ones and the leading ones the
    window's edge cuts."""
    out = []
    for c in ctx:
        start = max(c - (window - 1), 0) if window else 0
        start_al = start // bn * bn
        chunk = -(-(-(-(c - start_al) // splits)) // bn) * bn
        for s in range(splits):
            lo = start_al + s * chunk
            n_keys = max(min(c, lo + chunk) - lo, 0)
            n_tiles = -(-n_keys // bn)
            n_pre = min(max(-(-(c + b - 1 - (window - 1) - lo) // bn), 0), n_tiles) if window else 0
            out.append(Span(start, lo, n_tiles, n_keys // bn, n_pre))
    return out


def sm90_case(ctx, b, hq, hkv, causal, window, splits, page):
    """A variant test's case at head dim 128, bf16, NaN wherever the mask cannot reach, 32-token
    pages stored HND (TensorRT-LLM's) and others NHD: ``(module, case, mask, scale)``; skips the
    test without an SM90 GPU and Gluon's Hopper API (triton 3.6)."""
    import pytest

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an SM90 GPU")
    t = kernel_tests()
    from draftsmith.lowering import gluon_window_block as gwb
    from draftsmith.lowering.base import MaskSpec

    if not gwb.available():
        pytest.skip("needs Gluon's Hopper API (triton 3.6)")
    gen = torch.Generator().manual_seed(b * 1000 + hq + 7 * causal + (window or 0) + 31 * splits + page)
    case = t._gpu_case(len(ctx), b, hq, hkv, 128, page, ctx, window, dtype=torch.bfloat16, gen=gen,
                       poison_unreachable=True, layout="hnd" if page == 32 else "nhd")
    return t, case, MaskSpec(causal=causal, window=window), case[0].shape[-1] ** -0.5


def variant_module(variant: Path, switches=(), base: Path | None = None):
    """The product kernel with lab variant ``variant`` (after its ``On top of:`` chain) applied and
    each of ``switches`` (module-level ``NAME = False`` lines, ``wide_copy.switch_on``) set True,
    loaded as its own module beside the product's (``gluon_ab.kernel_at``, named after the variants
    and the switches). ``base``: a variant (with its chain) applied first, for a stack no header names."""
    import tempfile

    from gluon_ab import kernel_at
    from timed_kernel import chain, variant_source
    from wide_copy import switch_on

    text = switch_on(variant_source([*(chain(base) if base else ()), *chain(variant)])[0], switches)
    name = "_".join(v.stem for v in (base, variant) if v).replace("-", "_")
    tag = "".join("_" + n.lower() for n in switches)
    path = Path(tempfile.mkdtemp(prefix="variant_")) / (name + tag + ".py")
    path.write_text(text)
    return kernel_at(str(path))


def assert_launches(t, module, case, mask, scale, causal, window, splits, monkeypatch, **launch_kw):
    """``module.launch`` on ``case`` (from :func:`sm90_case`; ``t`` its test module) against the float64
    oracle, every output the launch allocates NaN until written, once per consumer build: with and
    without the overlap at one split, without it at more (``launch_kw``: the launch's other keys)."""
    q, cache, kb, vb = case
    assert module.fits(*case)
    t.poison_torch_empty(monkeypatch)
    for overlap in ((False, True) if splits == 1 else (False,)):
        out, lse = module.launch(q, cache, kb, vb, mask, scale, return_lse=True, num_splits=splits, overlap=overlap,
                                 **launch_kw)
        t._assert_oracle(case, out, lse, causal, window, scale)
