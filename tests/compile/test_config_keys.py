"""Issue 37: every config key accounted for (read by the family, a spec alias, ``config.fixed``
or ``config.irrelevant``), else refused in one line; ``dflash_config.attention_value_scale``
(MiMo's DFlash drafters; SGLang 0.5.23 ``models/dflash.py`` multiplies V by it before attention,
for the block and the context K/V alike, as read from its wheel) run by the host
and folded into ``o_proj`` by exports, each checked against the float64 oracle."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter, route
from draftsmith.framework.compile.converted_config import flatten
from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.convert.execute import convert
from draftsmith.framework.convert.export import export
from draftsmith.framework.convert.synth import layouts, source_config, synthesize
from draftsmith.framework.errors import UserError
from draftsmith.framework.runtime.draft import run_draft
from draftsmith.framework.spec.loading import adapter_files
from support.helpers import read_checkpoint
from support.oracles import draft_oracle

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny_pair" / "dspark" / "config.json"
CASES = [(n, l, s) for n in sorted(adapter_files()) for l in layouts(load_adapter(n)) for s in ("tiny", "full")]


@pytest.mark.parametrize("name,layout,scale", CASES, ids=[f"{n}-{l}-{s}" for n, l, s in CASES])
def test_every_shipped_config_accounted(name, layout, scale):
    """Every key of every adapter's synth config (each writer layout, both scales) is read,
    fixed or declared irrelevant: flattening accepts it and reports the irrelevant ones."""
    a = load_adapter(name)
    raw = source_config(a, scale, layout=layout) if layout != "spec" else source_config(a, scale)
    r = ResolvedDrafter.from_config(flatten(a, raw))
    for key, why in r.irrelevant.items():
        assert why in {**a.family.irrelevant, **a.spec.config.irrelevant}.values()


def test_fixture_accounted_and_reported(capsys):
    a = load_adapter("minimax_dspark")
    r = ResolvedDrafter.from_config(flatten(a, json.loads(FIXTURE.read_text())))
    assert set(r.irrelevant) == {"moe_layer_freq"}
    assert r.sources["config.use_gemma_norm"].startswith("config.json: text_config.use_gemma_norm")
    assert main(["inspect", f"source={FIXTURE.parent}"]) in (0, 1)
    out = capsys.readouterr().out
    assert "irrelevant moe_layer_freq  (spec config.irrelevant: MiniMax's MoE placement" in out


def _zlab_raw(edit) -> dict:
    raw = copy.deepcopy(source_config(load_adapter("zlab_dflash"), "tiny"))
    edit(raw)
    return raw


@pytest.mark.parametrize("edit,named", [
    (lambda r: r.update(logit_softcapping=30.0), "logit_softcapping"),
    (lambda r: r["dflash_config"].update(causal=True), "dflash_config.causal"),  # vLLM's override
    (lambda r: r["dflash_config"].update(attention_sink_bias=True), "dflash_config.attention_sink_bias"),
    (lambda r: r.update(rope_extra={"nested": {"deep": 1}}), "rope_extra.nested.deep"),
    (lambda r: r.update(is_neox_style=False), "is_neox_style"),
])
def test_unknown_key_refused_naming_it(edit, named):
    with pytest.raises(UserError) as e:
        flatten(load_adapter("zlab_dflash"), _zlab_raw(edit))
    (line,) = e.value.problems
    assert line.startswith(f"config.json: {named}: not read by family gqa_dflash nor adapter zlab_dflash")


def test_unknown_key_in_a_section_spelled_as_raw():
    a = load_adapter("minimax_dspark")
    raw = json.loads(FIXTURE.read_text())
    raw["text_config"]["dspark_new_thing"] = 3
    with pytest.raises(UserError) as e:
        flatten(a, raw)
    (line,) = e.value.problems
    assert line.startswith("config.json: text_config.dspark_new_thing: not read")


@pytest.mark.parametrize("name,edit,named", [
    ("minimax_dspark", lambda r: r["text_config"].update(use_gemma_norm=False), "text_config.use_gemma_norm"),
    ("minimax_dspark", lambda r: r["text_config"].update(qk_norm_type="per_layer"), "text_config.qk_norm_type"),
    ("minimax_dspark", lambda r: r["dspark_config"].update(hybrid_context_fusion=True), "dspark_config.hybrid_context_fusion"),
])
def test_fixed_values_refused_otherwise(name, edit, named):
    a = load_adapter(name)
    raw = json.loads(FIXTURE.read_text()) if name == "minimax_dspark" else _zlab_raw(lambda r: None)
    edit(raw)
    with pytest.raises(UserError) as e:
        flatten(a, raw)
    (line,) = e.value.problems
    assert line.startswith(f"config.json: {named}: ") and "implements only" in line


def test_bias_keys_read_not_fixed():
    """``attention_bias`` / ``mlp_bias`` are read by the family (the layout carries the biases):
    recorded with their source, absent ones as transformers' default false."""
    r = ResolvedDrafter.from_config(
        flatten(load_adapter("zlab_dflash"), _zlab_raw(lambda r: r.update(attention_bias=True))))
    assert r.attention_bias is True and r.sources["attention_bias"] == "config.json: attention_bias"
    assert r.mlp_bias is False and "default" in r.sources["mlp_bias"]


def test_shift_label_must_agree():
    with pytest.raises(UserError, match=r"dspark_config.shift_label: true contradicts sample_from_anchor false"):
        flatten(load_adapter("zlab_dflash"), _zlab_raw(lambda r: r.update(dspark_config={"shift_label": True})))
    flatten(load_adapter("zlab_dflash"), _zlab_raw(lambda r: r.update(dspark_config={"shift_label": False})))


@pytest.mark.parametrize("bad", [0, -0.5, "0.7", True, float("inf")])
def test_value_scale_checked(bad):
    with pytest.raises(UserError, match="dflash_config.attention_value_scale: .* must be a finite number > 0"):
        flatten(load_adapter("zlab_dflash"), 
            _zlab_raw(lambda r: r["dflash_config"].update(attention_value_scale=bad)))


def test_irrelevant_needs_a_reason(tmp_path):
    text = (Path(adapter_files()["zlab_dflash"])).read_text().replace(
        'auto_map: "names z-lab', 'auto_map: " "\n    x_unused: "names z-lab', 1)
    (tmp_path / "zlab_dflash.yaml").write_text(text)
    with pytest.raises(UserError, match="irrelevant.auto_map: give the reason"):
        load_adapter("zlab_dflash", adapter_dir=tmp_path)


# ---- the value scale ------------------------------------------------------------------------

SCALE = 0.6


def _scaled_zlab(tmp_path: Path) -> Path:
    synthesize(load_adapter("zlab_dflash"), "tiny", tmp_path / "S", seed=3)
    p = tmp_path / "S" / "config.json"
    raw = json.loads(p.read_text())
    raw["dflash_config"]["attention_value_scale"] = SCALE
    p.write_text(json.dumps(raw))
    return tmp_path / "S"


def _draft_vs_oracle(ck: Path, target: Path, tmp_path: Path, scale: float):
    """(relative error against the oracle with V scaled by ``scale``, against the unscaled one)."""
    dump = tmp_path / f"step-{ck.name}.safetensors"
    run_draft(ck, target, context=19, seed=2, dtype="float32", dump=dump)
    d = load_file(dump)
    cfg, w = read_checkpoint(ck)
    tgt = load_file(target / "model.safetensors")
    got = d["outputs.logits"].double()
    out = []
    for s in (scale, 1.0):
        oc = copy.deepcopy(cfg)
        oc["dflash_config"]["attention_value_scale"] = s  # the test's own scale, not the converted config's
        _, logits, _ = draft_oracle(oc, w, tgt, d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
        out.append(((got - logits).abs().max() / logits.abs().max()).item())
    return out


def test_value_scale_drafts_like_the_oracle(tmp_path):
    src = _scaled_zlab(tmp_path)
    a = route(json.loads((src / "config.json").read_text()))
    convert(a, src, tmp_path / "T", progress=False)
    r = ResolvedDrafter.from_config(json.loads((tmp_path / "T" / "config.json").read_text()))
    assert r.value_scale == SCALE and r.sources["value_scale"] == "config.json: dflash_config.attention_value_scale"
    right, unscaled = _draft_vs_oracle(tmp_path / "T", src / "target", tmp_path, SCALE)
    assert right < 1e-4 and unscaled > 1e-2, (right, unscaled)


def test_value_scale_folded_into_o_proj_by_export(tmp_path):
    """z-lab's and speculators' own forwards do not read the scale: the export multiplies
    every o_proj by it (attention is linear in V), writes no scale, and drafts the same."""
    src = _scaled_zlab(tmp_path)
    a = load_adapter("zlab_dflash")
    x = export(a, src, tmp_path / "X", "speculators", verifier="org/v")
    raw = json.loads((x / "config.json").read_text())
    assert "attention_value_scale" not in json.dumps(raw)
    back = route(raw)
    convert(back, x, tmp_path / "B", progress=False)
    convert(a, src, tmp_path / "T", progress=False)
    (_, wb), (_, wt) = read_checkpoint(tmp_path / "B"), read_checkpoint(tmp_path / "T")
    o = "layers.0.self_attn.o_proj.weight"
    assert torch.equal(wb[o], (wt[o].float() * SCALE).to(wt[o].dtype))
    assert ResolvedDrafter.from_config(read_checkpoint(tmp_path / "B")[0]).value_scale == 1.0
    (tmp_path / "B2").mkdir()
    right, unscaled = _draft_vs_oracle(tmp_path / "B", src / "target", tmp_path / "B2", 1.0)
    assert right < 1e-4  # the folded weights, run plainly
    right_src, _ = _draft_vs_oracle(tmp_path / "T", src / "target", tmp_path, SCALE)
    assert right_src < 1e-4
    folded = load_file(tmp_path / "B2" / "step-B.safetensors")["outputs.logits"].double()
    scaled = load_file(tmp_path / "step-T.safetensors")["outputs.logits"].double()
    assert ((folded - scaled).abs().max() / scaled.abs().max()).item() < 2e-2  # one bf16 rounding of s * W_o


def test_trtllm_problems_lists_the_value_scale(tmp_path):
    from draftsmith.framework.compile.trtllm_limits import trtllm_problems
    a = load_adapter("zlab_dflash")
    plain = ResolvedDrafter.from_config(flatten(a, _zlab_raw(lambda r: None)))
    assert trtllm_problems(plain) == []
    scaled = ResolvedDrafter.from_config(flatten(a, 
        _zlab_raw(lambda r: r["dflash_config"].update(attention_value_scale=0.707))))
    (line,) = trtllm_problems(scaled)
    assert line.startswith("dflash_config.attention_value_scale 0.707: TensorRT-LLM's DFlash attention has no value scale")
