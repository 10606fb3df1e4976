"""Config flattening of the MiniMax drafter's shipped config shape, and routing."""

import re
from pathlib import Path

import pytest

from draftsmith.framework.compile.adapter import load_adapter, route
from draftsmith.framework.compile.converted_config import flatten
from draftsmith.framework.compile.resolve import resolve
from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.framework.errors import UserError
from support.helpers import minimax, minimax_raw


def test_shipped_config_flattens():
    cfg = flatten(minimax(), minimax_raw())
    assert cfg["hidden_size"] == 6144 and cfg["num_hidden_layers"] == 5
    assert cfg["intermediate_size"] == 12288 and cfg["head_dim"] == 128 and cfg["rotary_dim"] == 64
    assert cfg["dflash_config"] == {
        "block_size": 7, "mask_token_id": 200058, "target_layer_ids": [3, 17, 31, 45, 59],
        "use_swa": True, "swa_window_size": 4096,
    }
    ds = cfg["dspark_config"]
    assert ds["markov_rank"] == 256 and ds["sample_from_anchor"] is True and ds["confidence_head_with_markov"] is True
    assert ds["hybrid_context_fusion"] is False  # top-level dspark_config merged, not lost
    assert "quantization_config" not in cfg and "text_config" not in cfg
    # the top-level dspark_* keys TensorRT-LLM's DSparkDecodingConfig falls back to (unset block_size,
    # mask_token_id, target_layer_ids, markov_rank, markov_head_type), rendered from the record: here
    # the shipped config's own values (issue 17 point 6)
    raw_text = minimax_raw()["text_config"]
    fallbacks = ("dspark_block_size", "dspark_noise_token_id", "dspark_target_layer_ids", "dspark_markov_rank",
                 "dspark_markov_head_type")
    assert {k: cfg[k] for k in fallbacks} == {k: raw_text[k] for k in fallbacks}
    assert ds["shift_label"] is True and cfg["use_sliding_window"] is False  # issue 17 points 2, 6
    assert cfg["torch_dtype"] == "bfloat16"
    r = R.from_config(cfg)
    assert r.max_draft_len == 7
    assert [m.causal for m in r.masks] == [False] * 5
    assert {m.window for m in r.masks} == {4096}
    assert r.norms["hidden_norm"] == "plain" and r.norms["q_norm"] == "gemma"
    assert r.sources["dims.head_dim"] == "config.json: text_config.head_dim"
    assert r.sources["sample_from_anchor"].startswith("spec default")


def test_nested_section_wins_over_top_level():
    raw = minimax_raw()
    raw["hidden_size"] = 1
    raw["vocab_size"] = 7
    raw["text_config"]["rope_theta"] = 123.0
    raw["rope_theta"] = 9.0
    cfg = flatten(minimax(), raw)
    assert cfg["hidden_size"] == 6144 and cfg["rope_theta"] == 123.0 and cfg["vocab_size"] == 200064


@pytest.mark.parametrize("spelling", [
    {"dspark_block_size": 5},
    {"dspark_config": {"block_size": 5}},
    {"block_size": 5},
])
def test_block_size_aliases(spelling):
    raw = minimax_raw()
    del raw["text_config"]["dspark_block_size"]
    raw["text_config"].update(spelling) if "dspark_config" not in spelling else raw.update(spelling)
    assert flatten(minimax(), raw)["dflash_config"]["block_size"] == 5


def test_alias_order_of_preference():
    raw = minimax_raw()
    raw["text_config"]["block_size"] = 3  # less preferred spelling present too
    assert flatten(minimax(), raw)["dflash_config"]["block_size"] == 7


def test_dtype_key_fallback():
    raw = minimax_raw()
    del raw["torch_dtype"], raw["text_config"]["torch_dtype"]
    raw["text_config"]["dtype"] = "float16"
    cfg = flatten(minimax(), raw)
    assert cfg["torch_dtype"] == "float16" and "dtype" not in cfg


def test_sliding_window_translation_and_override():
    raw = minimax_raw()
    raw["text_config"]["layer_types"] = ["sliding_attention", "full_attention"] * 2 + ["sliding_attention"]
    cfg = flatten(minimax(), raw)
    assert [m.window for m in R.from_config(cfg).masks] == [4096, None, 4096, None, 4096]
    assert cfg["dflash_config"]["use_swa"] is True
    a = load_adapter("minimax_dspark", ["attention.window=2048"])
    assert flatten(a, minimax_raw())["dflash_config"]["swa_window_size"] == 2048


def test_use_swa_only_window():
    raw = minimax_raw()
    del raw["text_config"]["layer_types"], raw["text_config"]["sliding_window"]
    raw["dflash_config"] = {"use_swa": True, "swa_window_size": 512}
    cfg = flatten(minimax(), raw)
    assert [m.window for m in R.from_config(cfg).masks] == [512] * 5
    assert [m.causal for m in R.from_config(cfg).masks] == [False] * 5


@pytest.mark.parametrize("meta", [{"is_causal": True}, {"sliding_window_non_causal": False}])
@pytest.mark.parametrize("use_swa_only", [False, True])
def test_explicit_causality_wins(meta, use_swa_only):
    raw = minimax_raw()
    if use_swa_only:
        del raw["text_config"]["layer_types"], raw["text_config"]["sliding_window"]
        raw["dflash_config"] = {"use_swa": True, "swa_window_size": 64}
    raw["text_config"].update(meta)
    masks = R.from_config(flatten(minimax(), raw)).masks
    assert all(m.causal for m in masks)
    a = load_adapter("minimax_dspark", ["attention.explicit_causality_wins=false"])
    assert not any(m.causal for m in R.from_config(flatten(a, raw)).masks)


@pytest.mark.parametrize("use_sliding_window", ["absent", False, True])
def test_hf_window_switch_follows_qwen3config(use_sliding_window):
    """Under ``hf_window_switch`` (zlab_dflash: its config is transformers' Qwen3Config) the
    windows are the ones Qwen3Config keeps: it sets ``sliding_window`` to None unless
    ``use_sliding_window`` is true, and an absent key defaults to False (transformers'
    ``Qwen3Config.__init__``, run here as the oracle), so ``sliding_attention`` layers see
    every key."""
    from transformers import Qwen3Config

    from draftsmith.framework.convert.synth import source_config

    a = load_adapter("zlab_dflash")
    raw = source_config(a, "tiny")
    n = raw["num_hidden_layers"]
    raw.update(sliding_window=6, layer_types=["sliding_attention"] * n)
    raw.pop("use_sliding_window")
    if use_sliding_window != "absent":
        raw["use_sliding_window"] = use_sliding_window
    theirs = Qwen3Config(**{k: raw[k] for k in ("num_hidden_layers", "sliding_window", "layer_types",
                                                 *(["use_sliding_window"] if "use_sliding_window" in raw else []))})
    want = [theirs.sliding_window if t == "sliding_attention" else None for t in theirs.layer_types]
    assert want == ([6] * n if use_sliding_window is True else [None] * n)  # the oracle's rule as stated
    r = resolve(a, raw)
    assert [m.window for m in r.masks] == want


@pytest.mark.parametrize("act", ["gelu", "relu", "gelu_pytorch_tanh", ["silu"]])
def test_unsupported_hidden_act_refused(act):
    """The MLP runs SwiGLU (``silu``) or ``swigluoai`` only: any other ``hidden_act`` (or a
    non-string) is refused in one line naming the key and the value, never run as SwiGLU."""
    raw = minimax_raw()
    raw["text_config"]["hidden_act"] = act
    with pytest.raises(UserError, match=re.escape(f"hidden_act {act!r} is not supported")) as e:
        flatten(minimax(), raw)
    assert "\n" not in str(e.value)


def test_per_layer_override():
    a = load_adapter("minimax_dspark", ["+adapter.attention.layers.2.causal=true", "+adapter.attention.layers.4.window=full"])
    masks = R.from_config(flatten(a, minimax_raw())).masks
    assert [m.causal for m in masks] == [False, False, True, False, False]
    assert masks[4].window is None and masks[3].window == 4096


def test_unhandled_quantization_refused():
    raw = minimax_raw()
    raw["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    with pytest.raises(UserError, match="quant_method 'fp8'.*mxfp8"):
        flatten(minimax(), raw)


def test_missing_required_field_named():
    raw = minimax_raw()
    del raw["text_config"]["dspark_noise_token_id"]
    with pytest.raises(UserError, match="dspark_noise_token_id"):
        flatten(minimax(), raw)


def test_routing_by_architecture():
    assert route(minimax_raw()).name == "minimax_dspark"
    raw = minimax_raw()
    raw["architectures"] = ["SomethingElse"]
    with pytest.raises(UserError, match="known adapters:.*minimax_dspark"):
        route(raw)


def _speculators_saved(marker: str, arch: str) -> dict:
    """The top of a config as speculators 0.9.0 saves it: ``SpeculatorModelConfig.to_dict`` puts
    ``speculators_model_type``; ``PreTrainedModel.save_pretrained`` sets ``architectures`` to the
    model class (``DFlashDraftModel`` / ``DSparkDraftModel``); ``to_dict`` strips ``model_type``
    (speculators 0.9.0 speculators/config.py, SpeculatorModelConfig.to_dict)."""
    return {"architectures": [arch], "speculators_model_type": marker}


@pytest.mark.parametrize("marker,arch,name", [("dflash", "DFlashDraftModel", "speculators_dflash"),
                                               ("dspark", "DSparkDraftModel", "speculators_dspark"),
                                               ("dflash", "DFlashSpeculator", "speculators_dflash")])
def test_routing_speculators_marker(marker, arch, name):
    assert route(_speculators_saved(marker, arch)).name == name


def test_routing_zlab_not_taken_by_marker():
    # z-lab's DFlashDraftModel (qwen3, no speculators marker) stays z-lab's
    assert route({"architectures": ["DFlashDraftModel"], "model_type": "qwen3"}).name == "zlab_dflash"
    with pytest.raises(UserError, match="speculators_model_type 'eagle3'"):
        route({"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "speculators_model_type": "eagle3"})


def test_routing_several_matches(tmp_path):
    import shutil
    from draftsmith.framework.spec.loading import adapter_files
    for n, f in adapter_files(None).items():
        shutil.copy(f, tmp_path / Path(f).name)
    raw = minimax_raw()
    raw["model_type"] = "minimax_m3_vl"
    assert route(raw, tmp_path).name == "minimax_dspark"  # both match: the preferred one serves
    p = tmp_path / "minimax_dspark.yaml"
    p.write_text(p.read_text().replace("  preferred: true", "  preferred: false"))
    with pytest.raises(UserError, match="adapters minimax_dspark, minimax_dspark_v0 all match.*none is marked"):
        route(raw, tmp_path)
