"""``convert ... to=NAME``: write another adapter's source format (its inverse run on the
converted weights), then convert that back: the same target tensors (norms re-styled
where the formats disagree), the same flattened semantics."""

import json

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.framework.cli.main import main
from draftsmith.framework.convert.execute import convert
from draftsmith.framework.compile.adapter import load_adapter, route
from draftsmith.framework.compile.converted_config import compile_config, flatten
from draftsmith.framework.errors import UserError
from draftsmith.framework.convert.export import _norm_kind, export, resolve_target, source_config_from_flat
from draftsmith.framework.convert.synth import synthesize
from support.helpers import read_checkpoint as read




def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def roundtrip(tmp_path, ck, to, adapter_dir=None, verifier="example-org/verifier-8b"):
    """The session's synthetic ``ck`` (conftest.py) and its conversion (reference); export
    to ``to`` -> route + convert back."""
    ref_cfg, ref = read(ck.converted)
    x = export(ck.adapter, ck.source, tmp_path / "exported", to, adapter_dir=adapter_dir, verifier=verifier)
    raw = json.loads((x / "config.json").read_text())
    back_adapter = route(raw, adapter_dir)
    back_cfg, back = read(convert(back_adapter, x, tmp_path / "back", progress=False))
    return ref_cfg, ref, raw, back_adapter, back_cfg, back


SEMANTIC = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "rotary_dim", "intermediate_size", "vocab_size", "target_hidden_size", "hidden_act", "torch_dtype",
            "rope_theta", "rms_norm_eps", "dflash_config", "dspark_config")


def assert_same_semantics(ref_cfg, back_cfg):
    """The keys the family reads agree (a source format's own keys, e.g. MiniMax's
    ``dspark_config.hybrid_context_fusion``, are not the drafter's semantics)."""
    from draftsmith.framework.compile.family import get_family
    from draftsmith.framework.convert.export import family_view
    fam = get_family("gqa_dflash")
    ref_view, back_view = family_view(fam, ref_cfg), family_view(fam, back_cfg)
    for k in SEMANTIC:
        assert back_view.get(k) == ref_view.get(k), k
    back, ref = R.from_config(back_cfg), R.from_config(ref_cfg)
    assert back.masks == ref.masks
    assert back.max_draft_len == ref.max_draft_len


def test_minimax_to_speculators_refused(tmp_path):
    """speculators' Qwen3 backbone has no clamped SwiGLU: refused in one line, nothing written."""
    mm = load_adapter("minimax_dspark")
    synthesize(mm, "tiny", tmp_path / "s", seed=1)
    with pytest.raises(UserError, match=r"cannot express the clamped SwiGLU.*swiglu_oai\)$") as e:
        export(mm, tmp_path / "s", tmp_path / "x", "speculators", verifier="v")
    assert len(e.value.args) == 1 and not (tmp_path / "x").exists()


def test_minimax_to_speculators_and_back(tmp_path, checkpoints):
    """The tensor/norm machinery, with a speculators_dspark spec whose runtime could run the MLP
    (``export.unsupported`` emptied in an adapter_dir copy)."""
    from draftsmith.framework.spec.loading import adapter_files
    d = tmp_path / "adapters"
    d.mkdir()
    text = adapter_files()["speculators_dspark"].read_text()
    (d / "speculators_dspark.yaml").write_text(text.replace("  unsupported: [swiglu_oai, partial_rotary, mlp_bias, mixed_causality]", "  unsupported: []"))
    ref_cfg, ref, raw, back_adapter, back_cfg, back = roundtrip(tmp_path, checkpoints("minimax_dspark"), "speculators", adapter_dir=d)
    assert back_adapter.name == "speculators_dspark"  # Markov head -> the DSpark format
    assert raw["speculators_model_type"] == "dspark" and raw["architectures"] == ["DSparkSpeculator"]
    # outputs 1, 3, 5 are the inputs of layers 2, 4, 6 in speculators' convention
    assert raw["aux_hidden_state_layer_ids"] == [i + 1 for i in ref_cfg["dflash_config"]["target_layer_ids"]]
    assert raw["sample_from_anchor"] is True and raw["markov_rank"] == ref_cfg["dspark_config"]["markov_rank"]
    assert raw["sliding_window_non_causal"] is True  # DSpark's non-causal windows, said explicitly
    assert_same_semantics(ref_cfg, back_cfg)
    assert sorted(back) == sorted(ref)
    gemma = {k for k, v in R.from_config(ref_cfg).norms.items() if v == "gemma"}
    assert gemma and all(v == "plain" for v in R.from_config(back_cfg).norms.values())
    restyled = 0
    for name, t in ref.items():
        kind = _norm_kind(back_adapter.family, name)
        if kind not in gemma:
            assert same_bits(back[name], t), name
        else:  # a Gemma norm, stored for a plain engine: bf16(1 + float32(w)), rounded once
            assert same_bits(back[name], (1.0 + t.float()).to(t.dtype)), name
            restyled += 1
    assert restyled == 2 * 3 + 1  # input/post_attention/q_norm per layer, and the final norm


@pytest.mark.parametrize("src_name,to,want", [
    ("zlab_dflash", "speculators", "speculators_dflash"),
    ("speculators_dflash", "trtllm_dflash", "trtllm_dflash"),
    ("trtllm_dflash", "zlab_dflash", "zlab_dflash"),
    ("speculators_dspark", "minimax_dspark_v0", None),
])
def test_exact_roundtrips(tmp_path, src_name, to, want, checkpoints):
    ref_cfg, ref, raw, back_adapter, back_cfg, back = roundtrip(tmp_path, checkpoints(src_name), to)
    if want is not None:
        assert back_adapter.name == want
    assert_same_semantics(ref_cfg, back_cfg)
    assert sorted(back) == sorted(ref)
    if to == "minimax_dspark_v0":  # MXFP8 re-quantization and Gemma norms: not exact, close
        def effective(cfg, adapter, n, t):  # the multiplier the engine applies: 1 + w for a Gemma norm
            kind = _norm_kind(adapter.family, n)
            return t.float() + 1.0 if kind and R.from_config(cfg).norms[kind] == "gemma" else t.float()

        for n, t in ref.items():
            got = effective(back_cfg, back_adapter, n, back[n])
            assert torch.allclose(got, effective(ref_cfg, back_adapter, n, t), rtol=0.07, atol=2e-3), n
        return
    bad = [n for n in ref if not same_bits(back[n], ref[n])]
    assert not bad


def test_trtllm_export_fuses_qkv(tmp_path, checkpoints):
    ck = checkpoints("zlab_dflash")
    x = export(ck.adapter, ck.source, tmp_path / "x", "trtllm_dflash")
    _, w = read(x)
    cfg = json.loads((x / "config.json").read_text())
    assert "layers.0.self_attn.qkv_proj.weight" in w and "layers.0.self_attn.q_proj.weight" not in w
    d, hq, hkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    assert w["layers.0.self_attn.qkv_proj.weight"].shape[0] == (hq + 2 * hkv) * d
    assert cfg["block_size"] == 16 and cfg["dflash_config"]["target_layer_ids"] == [1, 3, 5]


def test_to_alias_and_unknown(checkpoints):
    res = checkpoints("zlab_dflash").synth
    assert resolve_target("speculators", R.from_config(res.config)).name == "speculators_dflash"
    with pytest.raises(UserError, match="not an adapter name"):
        resolve_target("nope", R.from_config(res.config))


@pytest.mark.parametrize("src_name,to,what", [
    ("minimax_dspark", "zlab_dflash", "clamped SwiGLU"),       # z-lab's Qwen3 MLP is silu
    ("speculators_dspark", "zlab_dflash", "Markov .rank 16. / confidence .True. heads"),  # z-lab has no heads
    ("speculators_dspark", "speculators_dflash", "Markov"),      # named directly: the DFlash format has none
])
def test_unexpressible_is_refused(tmp_path, src_name, to, what):
    src = load_adapter(src_name)
    synthesize(src, "tiny", tmp_path / "s", seed=1)
    with pytest.raises(UserError, match=what) as e:
        export(src, tmp_path / "s", tmp_path / "x", to, verifier="v")
    assert len(e.value.args) == 1 and f"to={to}: the {to} format cannot express" in e.value.args[0]
    assert not (tmp_path / "x").exists()


def test_unsupported_features_detected(tmp_path):
    """partial rotary and causal windows, on a z-lab drafter changed to use them."""
    from draftsmith.framework.convert.export import refuse_unsupported
    zl = load_adapter("zlab_dflash")
    r = R.from_config(synthesize(zl, "tiny", tmp_path / "s", seed=1).config)
    refuse_unsupported(zl, r)  # as it is: fine
    half = r.model_copy(update={"dims": r.dims.model_copy(update={"rotary_dim": r.dims.head_dim // 2})})
    with pytest.raises(UserError, match="partial rotary .rotary_dim 16 of head_dim 32"):
        refuse_unsupported(zl, half)
    from draftsmith.lowering.base import MaskSpec
    layer = r.layers[0].model_copy(update={"mask": MaskSpec(causal=True, window=4)})
    with pytest.raises(UserError, match="causal sliding-window layers"):
        refuse_unsupported(zl, r.model_copy(update={"layers": (layer, *r.layers[1:])}))


def test_derived_fields_and_markers(tmp_path, checkpoints):
    """zlab -> speculators: the vocabulary, speculative_tokens = max_draft_len and the user's
    verifier are derived, never the template's; z-lab's auto_map is not carried; back to z-lab:
    num_target_layers from the source, speculators' marker not carried."""
    ref_cfg, ref, raw, back_adapter, back_cfg, back = roundtrip(tmp_path, checkpoints("zlab_dflash"), "speculators",
                                                               verifier="my-org/my-verifier")
    r = R.from_config(ref_cfg)
    assert raw["draft_vocab_size"] == r.dims.vocab == 256
    sc = raw["speculators_config"]
    assert sc["proposal_methods"][0]["speculative_tokens"] == r.max_draft_len == 15
    assert sc["verifier"] == {"name_or_path": "my-org/my-verifier", "architectures": []}
    assert "auto_map" not in raw and raw["speculators_model_type"] == "dflash"
    x2 = export(back_adapter, tmp_path / "exported", tmp_path / "zl", "zlab_dflash")
    raw2 = json.loads((x2 / "config.json").read_text())
    assert "speculators_model_type" not in raw2 and "speculators_config" not in raw2
    assert raw2["num_target_layers"] == 8  # z-lab's own value, carried through speculators' config
    assert route(raw2).name == "zlab_dflash"
    from draftsmith.framework.convert.export import derived_values
    flat = dict(ref_cfg)
    flat.pop("num_target_layers")  # a source that does not record the target's depth: one past the deepest id
    assert derived_values(load_adapter("zlab_dflash"), flat, R.from_config(flat), {}, None) == {"num_target_layers": 6}
    # speculators -> speculators keeps the source's verifier when none is given
    x3 = export(back_adapter, tmp_path / "exported", tmp_path / "sp", "speculators_dflash")
    assert json.loads((x3 / "config.json").read_text())["speculators_config"]["verifier"]["name_or_path"] == "my-org/my-verifier"


def test_verifier_required(tmp_path):
    zl = load_adapter("zlab_dflash")
    synthesize(zl, "tiny", tmp_path / "s", seed=1)
    with pytest.raises(UserError, match="pass verifier="):
        export(zl, tmp_path / "s", tmp_path / "x", "speculators")
    assert not (tmp_path / "x").exists()


def test_config_inverse_uses_first_alias():
    mm = load_adapter("minimax_dspark")
    from draftsmith.framework.convert.synth import source_config

    flat, record = compile_config(mm, source_config(mm, "tiny"))
    raw = source_config_from_flat(mm, flat, record)
    tc = raw["text_config"]
    assert tc["dspark_block_size"] == 7 and tc["dspark_noise_token_id"] == 250
    assert tc["dspark_target_layer_ids"] == [1, 3, 5] and tc["dense_intermediate_size"] == 256
    assert raw["quantization_config"]["quant_method"] == "mxfp8"  # a format descriptor from the template


def test_cli_convert_to(tmp_path, capsys):
    s = tmp_path / "s"
    assert main(["synth", "adapter=zlab_dflash", f"out={s}"]) == 0
    assert main(["convert", f"source={s}", f"out={tmp_path / 'x'}", "to=speculators", "verifier=org/v"]) == 0
    assert main(["inspect", f"source={tmp_path / 'x'}"]) == 0
    assert "speculators_dflash" in capsys.readouterr().out


@pytest.mark.parametrize("to", ["speculators", "trtllm_dflash"])
def test_int_rope_theta_exports(tmp_path, to):
    """Issue 37 point 4: speculators 0.9 / transformers 5 write ``rope_parameters.rope_theta:
    1000000`` (a JSON integer); the export carries it beside the flattened float ``rope_theta``
    and reading it back must see one value (compared as numbers), not refuse it."""
    from draftsmith.framework.spec.loading import adapter_files
    d = tmp_path / "adapters"  # the tiny drafter's mixed causality aside (refused for vLLM: test_crosscheck_readers_vllm)
    d.mkdir()
    for name, path in adapter_files().items():
        (d / path.name).write_text(path.read_text().replace(", mixed_causality]", "]"))
    src = load_adapter("speculators_dflash", adapter_dir=d)
    synthesize(src, "tiny", tmp_path / "s", seed=1, layout="speculators")
    raw = json.loads((tmp_path / "s" / "config.json").read_text())
    assert type(raw["transformer_layer_config"]["rope_parameters"]["rope_theta"]) is int
    x = export(src, tmp_path / "s", tmp_path / "x", to, adapter_dir=d, verifier="org/v")
    back = flatten(route(json.loads((x / "config.json").read_text()), d), json.loads((x / "config.json").read_text()))
    assert back["rope_theta"] == 1e6


@pytest.mark.parametrize("a,b,same", [
    (1000000, 1000000.0, True), (10000, 10000, True), (1000000, 1000001, False),
    ("1000000", 1000000, False), (True, 1.0, False),
])
def test_rope_theta_spellings_compared_as_numbers(a, b, same):
    from draftsmith.framework.compile.family import get_family
    cfg = {"rope_theta": a, "rope_parameters": {"rope_theta": b, "rope_type": "default"}, "head_dim": 32}
    fam = get_family("gqa_dflash")
    if same:
        fam.complete_rope(cfg)
        assert cfg["rope_theta"] == float(b) and cfg["rotary_dim"] == 32
    else:
        with pytest.raises(UserError, match="rope_theta"):
            fam.complete_rope(cfg)


def test_speculators_export_of_mixed_causality_refused(tmp_path, checkpoints):
    """Issue 37 point 5, as vLLM 0.33 reads it (tests/upstream/readers/test_crosscheck_readers_vllm.py runs its
    code): ``update_dflash`` turns ``sliding_window_non_causal`` into one
    ``dflash_config.causal`` for every layer, so a causal sliding layer beside a full
    non-causal one cannot be written for it: refused in one line, nothing written."""
    ck = checkpoints("speculators_dflash")
    masks = [(m.causal, m.window is not None) for m in R.from_config(read(ck.converted)[0]).masks]
    assert masks == [(True, True), (False, False)]  # the case: causal window, full non-causal
    with pytest.raises(UserError, match=r"differing causality \(causal: \[True, False\]") as e:
        export(ck.adapter, ck.source, tmp_path / "x", "speculators", verifier="org/v")
    assert len(e.value.args) == 1 and not (tmp_path / "x").exists()


def test_speculators_dflash_export_writes_no_is_causal(tmp_path, checkpoints):
    """A drafter of one causality (trtllm_dflash: a non-causal window, a non-causal full layer)
    exports to speculators' DFlash format with ``sliding_window_non_causal`` alone, as
    speculators saves it (vLLM derives every layer's causality from it)."""
    ref_cfg, ref, raw, back_adapter, back_cfg, back = roundtrip(tmp_path, checkpoints("trtllm_dflash"), "speculators")
    assert back_adapter.name == "speculators_dflash"
    assert "is_causal" not in json.dumps(raw)
    assert raw["sliding_window_non_causal"] is True
    assert_same_semantics(ref_cfg, back_cfg)


def test_zlab_export_of_a_gemma_drafter_drops_use_gemma_norm(tmp_path, checkpoints):
    """Issue 37 point 6: norms re-stored as ``1 + w`` for z-lab's plain RMSNorm must not travel
    with ``use_gemma_norm: true`` (SGLang would add 1 again). The MiniMax drafter, exported to a
    z-lab spec whose runtime is told it can run the rest (``export.unsupported`` emptied, a
    ``sample_from_anchor`` key)."""
    from draftsmith.framework.spec.loading import adapter_files
    d = tmp_path / "adapters"
    d.mkdir()
    for name, path in adapter_files().items():
        text = path.read_text()
        if name == "zlab_dflash":
            text = text.replace("  unsupported: [swiglu_oai, partial_rotary, causal_windows, heads, target_hidden, mlp_bias]",
                                "  unsupported: []").replace(
                "    dspark_config.sample_from_anchor: {default: false}",
                "    dspark_config.sample_from_anchor: {from: [sample_from_anchor], default: false}")
        (d / f"{name}.yaml").write_text(text)
    ck = checkpoints("minimax_dspark")
    assert read(ck.converted)[0]["use_gemma_norm"] is True
    ref_cfg, ref, raw, back_adapter, back_cfg, back = roundtrip(tmp_path, ck, "zlab_dflash", adapter_dir=d)
    assert "use_gemma_norm" not in json.dumps(raw) and "qk_norm_type" not in json.dumps(raw)
    assert all(v == "plain" for v in R.from_config(back_cfg).norms.values())
    n = "layers.0.input_layernorm.weight"
    assert same_bits(back[n], (1.0 + ref[n].float()).to(ref[n].dtype))
