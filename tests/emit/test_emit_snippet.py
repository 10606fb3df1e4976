"""Issue 34 fix 4: ``speculative_config.yaml`` carries only fields TensorRT-LLM's decoding config
defines, validated by the real pydantic models (``llm_args_excerpt.py``, NVIDIA/TensorRT-LLM @
00043967, on its ``StrictBaseModel``: extra keys forbidden), and ``speculative_model`` is the
converted folder when ``config=<converted>`` is given."""

from __future__ import annotations

import json

import pytest
import yaml

from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.emit.render import (
    DECODING_CONFIG_FIELDS, DERIVED_KEYS, SPECULATIVE_MODEL_PLACEHOLDER, emit, write_package)
from draftsmith.framework.spec.loading import adapter_files
from support.helpers import emit_refusal
from test_emit_runtime import FakeAdapter
from support.trtllm_shim import loader
from support.host_case import make_config


@pytest.fixture(scope="module")
def llm_args():
    return loader().llm_args()


def decoding_class(la, dtype):
    return la[f"{dtype}DecodingConfig"]


@pytest.mark.parametrize("dtype", ["DFlash", "DSpark"])
def test_the_field_table_is_the_real_models(llm_args, dtype):
    assert DECODING_CONFIG_FIELDS[dtype] == set(decoding_class(llm_args, dtype).model_fields)
    assert DERIVED_KEYS - {"block_size", "markov_rank", "markov_head_type"} <= DECODING_CONFIG_FIELDS["DFlash"]


@pytest.mark.parametrize("name", sorted(adapter_files()))
def test_every_adapters_snippet_is_accepted_by_the_real_decoding_config(tmp_path, llm_args, name):
    """Fails on the old DFlash snippets (``block_size``: no such field; StrictBaseModel forbids it)."""
    if emit_refusal(name):
        pytest.skip(f"{name}: emit refuses it: {emit_refusal(name)}")
    res = emit(name, out=tmp_path / "out")
    doc = yaml.safe_load((res.package_dir / "speculative_config.yaml").read_text())
    sc = doc["speculative_config"]
    cfg = decoding_class(llm_args, res.decoding_type)(**sc)
    assert cfg.max_draft_len == res.max_draft_len == cfg.max_total_draft_tokens
    assert sc["decoding_type"] == res.decoding_type and sc["speculative_model"] == SPECULATIVE_MODEL_PLACEHOLDER
    if res.decoding_type == "DFlash":
        assert "block_size" not in sc


def test_speculative_model_is_the_converted_folder(tmp_path, llm_args):
    folder = tmp_path / "converted"
    folder.mkdir()
    config = make_config()
    (folder / "config.json").write_text(json.dumps(config))
    spec_file = tmp_path / "test.yaml"
    spec_file.write_text("name: test\n")
    res = write_package(FakeAdapter(config), spec_file, tmp_path / "out", config=folder)
    sc = yaml.safe_load(res.speculative_config)["speculative_config"]
    assert sc["speculative_model"] == str(folder.resolve())
    r = ResolvedDrafter.from_config(config)
    assert (sc["max_draft_len"], sc["mask_token_id"], sc["target_layer_ids"]) == (
        r.max_draft_len, r.mask_token_id, list(r.target_layer_ids))
    decoding_class(llm_args, res.decoding_type)(**sc)
    res2 = write_package(FakeAdapter(config), spec_file, tmp_path / "out2", config=folder / "config.json")
    assert yaml.safe_load(res2.speculative_config)["speculative_config"]["speculative_model"] == str(folder.resolve())


EXAMPLE_LINE = "no config= given: "


def test_without_config_the_example_values_are_named_once(tmp_path):
    """Issue 36 point 6: without ``config=`` the snippet's token and layer ids are the adapter's
    example (``synth.config``); the summary and the file say so (fails on the silent old code)."""
    res = emit("minimax_dspark", out=tmp_path / "out")
    synth = yaml.safe_load(res.adapter_file.read_text())["synth"]["config"]["text_config"]
    block, mask, layers = synth["dspark_block_size"], synth["dspark_noise_token_id"], synth["dspark_target_layer_ids"]
    lines = res.summary().splitlines()
    hits = [i for i, line in enumerate(lines) if line.startswith(EXAMPLE_LINE)]
    assert len(hits) == 1 and lines[hits[0] - 1] == f"max_draft_len = {res.max_draft_len}"
    want = (f"block_size {block}, mask_token_id {mask}, target_layer_ids [{', '.join(map(str, layers))}] "
            "and max_draft_len come from the adapter's example config")
    assert lines[hits[0]] == (f"{EXAMPLE_LINE}{want} (synth.config in {res.adapter_file}), not from a checkpoint; "
                              "pass config=<drafter config.json> for yours")
    text = (res.package_dir / "speculative_config.yaml").read_text()
    comments = [line for line in text.splitlines() if line.startswith("# " + EXAMPLE_LINE)]
    assert len(comments) == 1 and want in comments[0]
    sc = yaml.safe_load(text)["speculative_config"]
    assert (sc["mask_token_id"], sc["target_layer_ids"]) == (mask, layers)


def test_with_config_the_checkpoints_values_and_no_example_line(tmp_path):
    res0 = emit("minimax_dspark", out=tmp_path / "out0")
    raw = yaml.safe_load(res0.adapter_file.read_text())["synth"]["config"]
    example_mask = raw["text_config"]["dspark_noise_token_id"]
    mask = example_mask - 7
    raw["text_config"]["dspark_noise_token_id"] = mask
    folder = tmp_path / "ckpt"
    folder.mkdir()
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.compile.converted_config import compile_config

    flat, _ = compile_config(load_adapter("minimax_dspark"), raw)  # the config.json `convert` writes
    (folder / "config.json").write_text(json.dumps(flat))
    res = emit("minimax_dspark", out=tmp_path / "out", config=folder)
    assert not [line for line in res.summary().splitlines() if EXAMPLE_LINE in line]
    text = (res.package_dir / "speculative_config.yaml").read_text()
    assert EXAMPLE_LINE not in text
    assert yaml.safe_load(text)["speculative_config"]["mask_token_id"] == mask != example_mask


@pytest.mark.parametrize("trtllm_gen", ["available", "unavailable"])
def test_snippet_backend_is_one_trtllm_builds_the_drafter_with(tmp_path, llm_args, trtllm_gen):
    """The snippet must name VANILLA, by TensorRT-LLM's own code (modeling_dflash.py /
    modeling_dspark.py @ amukkara d70a2287, run from the excerpts): ``_build_dspark_draft`` hands
    the decoding config's ``attention_backend`` to ``DFlashForCausalLM.__init__``, whose
    ``check_valid_attention_backend`` refuses TRTLLM wherever ``dflash_trtllm_gen_unavailability_reason()``
    gives a reason (flashinfer's trtllm-gen FMHA: SM100/SM103 only, per the field's description in
    llm_args.py; the snippet is one per adapter, for every GPU), and whose
    ``validate_block_attention_windows`` refuses TRTLLM for a non-causal windowed layer (the MiniMax
    drafter's every layer) even where trtllm-gen runs. VANILLA builds in both."""
    import types

    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.compile.converted_config import compile_config
    from draftsmith.framework.convert.synth import source_config

    flat, _ = compile_config(load_adapter("minimax_dspark"), source_config(load_adapter("minimax_dspark"), "tiny"))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(flat))  # the config.json `convert` writes
    res = emit("minimax_dspark", out=tmp_path / "out", config=folder)
    sc = yaml.safe_load((res.package_dir / "speculative_config.yaml").read_text())["speculative_config"]
    spec = decoding_class(llm_args, res.decoding_type)(**sc)  # the real pydantic model
    ld = loader()
    cu = ld.config_utils()
    df = ld.dflash(cu, trtllm_gen_unavailable_reason=None if trtllm_gen == "available" else "no SM100/SM103 here")
    ds = ld.dspark(cu, df)
    mc = ld.ModelConfig(pretrained_config=None, spec_config=spec)
    dm = ds["_build_dspark_draft"](mc, ld.ModelConfig(pretrained_config=types.SimpleNamespace(**flat)), None, None)
    assert dm.dflash_attention_backend == sc["attention_backend"]
    resolved = [dm._resolve_block_attention(i) for i in range(flat["num_hidden_layers"])]
    assert all(not causal and left >= 0 for causal, (left, _) in resolved), resolved  # the case that matters
    assert dm.validate_block_attention_windows() is None
