"""Issue 34 point 1: the emitted package, and the draftsmith code it calls at run time
(framework/emit/*.py), use on TensorRT-LLM's drafter only attributes and methods the pinned class
defines (the excerpt's definitions plus its ``# [omitted: ...]`` lists; api_surface.py)."""

import pytest

import excerpts
from api_surface import PINNED, pinned_surface, uses_on_drafter
from harness import REPO

RUNTIME_MODULES = sorted((REPO / "framework" / "emit").glob("*.py"))


@pytest.fixture(scope="module")
def surface():
    src = excerpts.require()
    ld = excerpts.loader()
    return {name: pinned_surface(src, ld, name) for name in PINNED}


def _check(files, allowed, what, min_uses=0):
    uses = [u for f in files for u in uses_on_drafter(f, {"DFlashForCausalLM", "GQADSparkForCausalLM"})]
    assert len(uses) >= min_uses, f"{what}: the walk found {len(uses)} uses on the drafter (expected some): {uses}"
    bad = sorted({f"{where} line {line}: .{attr}" for line, attr, where in uses if attr not in allowed})
    assert not bad, (f"{what} uses on TensorRT-LLM's drafter what the pinned class does not define "
                     f"(amukkara/TensorRT-LLM modeling_dflash.py @ d70a2287, NVIDIA modeling_dspark.py @ "
                     f"008b54fe): " + "; ".join(bad))


def test_surface_is_read_from_the_excerpts(surface):
    s = surface["GQADSparkForCausalLM"]
    assert {"_resolve_block_attention", "dflash_forward", "_dspark_shift_label", "_layer_windows",
            "load_weights", "_fused_kv_weight"} <= s
    assert "_rope" not in s and "_rope" not in surface["DFlashForCausalLM"]


def test_runtime_helpers_use_only_the_pinned_api(surface):
    _check(RUNTIME_MODULES, surface["GQADSparkForCausalLM"], "framework/emit", min_uses=3)


def test_emitted_package_uses_only_the_pinned_api(case, surface):
    pkg = case.package()
    allowed = surface["GQADSparkForCausalLM"] if not case.is_dflash else surface["DFlashForCausalLM"]
    _check(sorted(pkg.glob("*.py")), allowed, f"the package emitted for {case.adapter}")
