"""``draftsmith emit``: the package it writes, read as files.

The package's Python is fixed text (tests/hostile/test_emit_hostile.py plants payloads); what it does
inside TensorRT-LLM is tests/emit/test_emit_runtime.py (the conformance shim `tensorrt_llm`) and
tests/upstream/trtllm. Here: the fixed text, the data it carries, the snippet, max_draft_len,
the version floor, atomic re-emit.
"""

from __future__ import annotations

import json
import py_compile
from types import SimpleNamespace

import pytest
import yaml

from draftsmith.framework.io.ownership import MARKER
from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.framework.compile.resolved import max_draft_len_rule
from draftsmith.framework.emit.binding import PackagedDrafter, check_engine_version, version_key
from draftsmith.framework.emit.render import (
    EngineNames,
    decoding_type,
    max_draft_len_of,
    write_package,
)
from draftsmith.framework.emit.fixed import PYTHON_FILES
from draftsmith.framework.errors import UserError
from support.host_case import BLOCK, make_config

ARCH = "DSparkDraftModel"
TRTLLM = EngineNames()


# ---- helpers ------------------------------------------------------------------------------------


class FakeAdapter:
    """The part of ``adapter.Adapter`` emission and the binding use; configs are already flat."""

    def __init__(self, config: dict, name: str = "test"):
        self.name, self.architectures = name, [ARCH]
        self.spec = SimpleNamespace(synth=SimpleNamespace(config=config), docs=SimpleNamespace(serving={}))



def adapter_file(tmp_path: Path) -> Path:
    path = tmp_path / "test.yaml"
    path.write_text("name: test\n# stands in for the adapter file\n")
    return path


# ---- max_draft_len --------------------------------------------------------------------------------


def test_max_draft_len_derivation():
    assert max_draft_len_rule(7, True) == 7
    assert max_draft_len_rule(7, False) == 6
    with pytest.raises(UserError, match="leaves no slot to draft"):
        max_draft_len_rule(1, False)
    flat = make_config(sfa=True)
    assert max_draft_len_of(R.from_config(flat))[0] == BLOCK
    assert max_draft_len_of(R.from_config(make_config(sfa=False)))[0] == BLOCK - 1
    # the compiled section decides; the raw dspark_config is not read again
    no_dspark = {k: v for k, v in make_config(sfa=False).items() if k != "dspark_config"}
    assert max_draft_len_of(R.from_config(no_dspark))[0] == BLOCK - 1
    no_section = {k: v for k, v in make_config(sfa=False).items() if k != "draftsmith"}
    with pytest.raises(UserError, match="no draftsmith section"):
        max_draft_len_of(R.from_config(no_section))


def test_contradicting_max_draft_len_is_refused(tmp_path):
    with pytest.raises(UserError, match="contradicts the derived max_draft_len 4"):
        max_draft_len_of(R.from_config(make_config(sfa=True)), explicit=3)
    bad = make_config(sfa=True)
    bad["draftsmith"]["max_draft_len"] = 3
    with pytest.raises(UserError, match="max_draft_len 3 contradicts the derived 4"):
        write_package(FakeAdapter(bad), adapter_file(tmp_path), tmp_path / "out", TRTLLM)
    with pytest.raises(UserError, match="adapter spec max_draft_len = 5"):
        write_package(FakeAdapter(make_config()), adapter_file(tmp_path), tmp_path / "out", TRTLLM,
                      explicit_max_draft_len=5)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["hidden_norm", "k_norm"])
def test_emit_refuses_a_gemma_norm_trtllm_applies_plainly(tmp_path, kind):
    """compile/trtllm_limits.norm_problem: TensorRT-LLM runs these two kinds plainly, so emit refuses
    one stored Gemma-style (``w``) in one line naming it; ``init`` folds the same kinds."""
    from draftsmith.framework.compile.trtllm_limits import PLAIN_NORMS, norm_problem

    assert norm_problem(R.from_config(make_config())) is None  # gemma elsewhere, these two plain
    bad = make_config()
    bad["draftsmith"]["norms"][kind] = "gemma"
    line = norm_problem(R.from_config(bad))
    assert line.startswith(f"{kind} stored Gemma-style") and "mode: fold" in line
    with pytest.raises(UserError, match=f"^adapter test: {kind} stored Gemma-style; TensorRT-LLM applies them"):
        write_package(FakeAdapter(bad), adapter_file(tmp_path), tmp_path / "out", TRTLLM)
    assert not (tmp_path / "out").exists()
    assert set(PLAIN_NORMS) == {"hidden_norm", "k_norm"}


# ---- the emitted text -------------------------------------------------------------------------------


def test_emitted_text_is_fixed_compiles_names_no_path_and_carries_the_drafter(tmp_path):
    yaml_file = adapter_file(tmp_path)
    config = make_config()
    res = write_package(FakeAdapter(config), yaml_file, tmp_path / "out", TRTLLM)
    assert res.max_draft_len == BLOCK and res.architecture == ARCH
    for f, text in PYTHON_FILES.items():
        assert (res.package_dir / f).read_text() == text
        compile(text, f, "exec")
        assert str(tmp_path) not in text and ARCH not in text and "test" not in text, f
    data = json.loads((res.package_dir / "resolved.json").read_text())
    assert R.model_validate(data["resolved"]) == R.from_config(config)
    assert (data["architecture"], data["decoding_type"], data["backbone"]) == (ARCH, "DSpark", "generated")
    assert PackagedDrafter.from_package(res.package_dir).architecture == ARCH
    snippet = yaml.safe_load((res.package_dir / "speculative_config.yaml").read_text())["speculative_config"]
    r = R.from_config(config)
    assert snippet == {"decoding_type": decoding_type(r), "speculative_model": "/path/to/converted/drafter",
                       "max_draft_len": BLOCK, "mask_token_id": r.mask_token_id,
                       "target_layer_ids": list(r.target_layer_ids), "attention_backend": "VANILLA",
                       "block_size": r.block_size}
    assert res.speculative_config.rstrip() in res.summary()
    paste = (res.package_dir / "PASTE.md").read_text()
    assert f"{ARCH!r}: 'modeling_draftsmith_test'," in paste and f"    {ARCH!r}," in paste


def test_decoding_type_follows_the_heads(tmp_path):
    """DFlash (no head, no shift) on DFlashForCausalLM with a DFLASH builder; DSpark otherwise."""
    from draftsmith.framework.emit.runtime import DECODING_BASES, MODES

    for sfa, want in ((False, "DFlash"), (True, "DSpark")):
        config = make_config(sfa=sfa)
        section = dict(config["draftsmith"], heads={"markov_rank": 0, "markov_head_type": "vanilla",
                                                    "confidence": False, "confidence_with_markov": False})
        config = dict(config, draftsmith=section)
        res = write_package(FakeAdapter(config), adapter_file(tmp_path), tmp_path / f"out{sfa}", TRTLLM)
        assert res.decoding_type == want == PackagedDrafter.from_package(res.package_dir).decoding_type
        assert f"decoding_type: {want}" in res.speculative_config
    assert DECODING_BASES["DFlash"][1] == "DFlashForCausalLM" and MODES == {"DFlash": "DFLASH", "DSpark": "DSPARK"}


def test_unknown_device_class_is_left_to_trtllm_and_worker_mask_limits(tmp_path):
    """sm120 (no table in the spec) raises no draftsmith error; TensorRT-LLM's own forward runs."""
    from draftsmith.framework.emit.binding import BoundDrafter
    from draftsmith.framework.compile.trtllm_limits import worker_mask_problems

    r = R.from_config(make_config())
    bound = BoundDrafter(r.adapter, r)
    assert bound.lowerings("sm120") is None and bound.check_combination("TRTLLM", "sm120") is None
    assert bound.lowerings("cpu") == tuple(l.lowering["cpu"] for l in r.layers)
    causal = r.model_copy(update={"layers": tuple(l.model_copy(update={"mask": type(l.mask)(True, None)})
                                                  for l in r.layers)})
    assert worker_mask_problems(causal) and "causal full attention" in worker_mask_problems(causal)[0]
    # causal windows only: one use_sliding_window flag expresses them under d70a2287's rule, but
    # PR #17935's rule runs every sliding layer of a non-DFlash-2 drafter non-causally
    windows = r.model_copy(update={"layers": tuple(l.model_copy(update={"mask": type(l.mask)(True, 8)})
                                                   for l in r.layers)})
    assert worker_mask_problems(windows) == [f"layers {list(range(len(r.layers)))}: causal windows (run "
                                             "non-causally by releases with TensorRT-LLM PR #17935)"]
    noncausal = r.model_copy(update={"layers": tuple(l.model_copy(update={"mask": type(l.mask)(False, 8)})
                                                     for l in r.layers)})
    assert worker_mask_problems(noncausal) == []


def test_engine_version_floor():
    assert version_key("1.4.0rc1") < version_key("1.4.0") < version_key("1.4.1rc1")
    assert version_key("1.3.0rc27") < version_key("1.4.0rc1") <= version_key("1.4.0rc1")
    check_engine_version("1.4.0rc4", "1.4.0rc1", "pkg")
    with pytest.raises(ImportError, match=r"^pkg needs TensorRT-LLM >= 1.4.0rc1 .* 1.3.0rc27$"):
        check_engine_version("1.3.0rc27", "1.4.0rc1", "pkg")


def test_re_emit_replaces_whole_and_a_failed_emit_leaves_the_old_package(tmp_path, monkeypatch):
    import draftsmith.framework.emit.render as emit_mod

    yaml, out = adapter_file(tmp_path), tmp_path / "out"
    res = write_package(FakeAdapter(make_config()), yaml, out, TRTLLM, overwrite=True)
    (res.package_dir / "stray.txt").write_text("left by hand")
    before = {p.name: p.read_bytes() for p in res.package_dir.iterdir()}
    assert "stray.txt" in before and "__pycache__" not in before

    def broken(*a, **k):
        raise py_compile.PyCompileError(SyntaxError, SyntaxError("poisoned"), "drafter.py")

    monkeypatch.setattr(emit_mod.py_compile, "compile", broken)
    with pytest.raises(py_compile.PyCompileError):
        write_package(FakeAdapter(make_config()), yaml, out, TRTLLM, overwrite=True)
    assert {p.name: p.read_bytes() for p in res.package_dir.iterdir()} == before
    assert sorted(p.name for p in out.iterdir()) == [res.package_dir.name]  # no temp dir left
    monkeypatch.undo()
    res2 = write_package(FakeAdapter(make_config()), yaml, out, TRTLLM, overwrite=True)
    assert sorted(p.name for p in res2.package_dir.iterdir()) == sorted([f.name for f in res2.files] + [MARKER])


# ---- the real adapters -------------------------------------------------------------------------------


def test_emit_minimax_dspark(tmp_path):
    from draftsmith.framework.emit.render import emit

    res = emit("minimax_dspark", target="trtllm", out=tmp_path / "out")
    assert res.max_draft_len == 7 and res.architecture == "DSparkMiniMaxDraftModel" and res.decoding_type == "DSpark"
    assert PackagedDrafter.from_package(res.package_dir).backbone == "generated"  # not MiniMaxM3ForCausalLM
    with pytest.raises(UserError, match="unknown; known: trtllm"):
        emit("minimax_dspark", target="vllm", out=tmp_path / "x")


def test_cli_bakes_overrides_into_the_packaged_drafter(tmp_path, capsys):
    from draftsmith.framework.cli.main import main

    args = ["emit", "adapter=minimax_dspark", "target=trtllm", f"out={tmp_path}", "adapter.attention.window=2048",
            "adapter.attention.lowering.windowed.sm100=trtllm_gen"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "max_draft_len = 7" in printed and "decoding_type: DSpark" in printed
    pkg = tmp_path / "draftsmith_minimax_dspark"
    r = PackagedDrafter.from_package(pkg).resolved
    assert all(l.mask.window == 2048 and l.lowering["sm100"] == "trtllm_gen" for l in r.layers)
    assert main(["emit", "adapter=minimax_dspark", "target=vllm", f"out={tmp_path}"]) == 2
