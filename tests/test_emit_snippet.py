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
from test_emit_runtime import FakeAdapter
from test_emit_trtllm_fake import loader
from test_host import make_config


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
