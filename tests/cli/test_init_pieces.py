"""``draftsmith init``, piece by piece: each function building a piece of the starter spec,
tested alone on hand-made checkpoint views; the family's target layout read (not restated);
fused projections recognised under any layer naming; no function over 60 lines."""

import ast
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from draftsmith.framework.starter import attention as init_attention, config as init_config, layout as init_layout
from draftsmith.framework.starter import read as init_read, weights as init_weights
from draftsmith.framework.starter.infer import infer
from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.family import GQADFlash, get_family
from draftsmith.framework.compile.resolve import merge_sections
from draftsmith.framework.convert.execute import execute
from draftsmith.framework.convert.plan import plan as conversion_plan
from draftsmith.framework.spec.schema import AdapterSpec
from draftsmith.transforms.base import TensorMeta
from support.helpers import read_checkpoint

BF16 = torch.bfloat16
LAYOUT = init_layout.target_layout(get_family("gqa_dflash"))
STARTER = Path(init_layout.__file__).parent


def view(names: dict[str, tuple], raw: dict | None = None, dtype=BF16) -> init_read.Checkpoint:
    """A checkpoint view from names -> shapes (what read_checkpoint builds from a folder)."""
    raw = raw or {}
    headers = {n: TensorMeta(s, dtype) for n, s in names.items()}
    prefix = init_read.common_prefix(sorted(headers))
    rel = {n: n[len(prefix):] for n in sorted(headers)}
    return init_read.Checkpoint(Path("ck"), raw, headers, [], merge_sections(raw, []), prefix, rel,
                                init_read.layer_names(rel, LAYOUT))


def dflash_names(layer: str, fused: bool, lead: str = "") -> dict[str, tuple]:
    """Tensor names of a two-layer DFlash drafter, layers under ``layer.{i}``."""
    out = {f"{lead}fc.weight": (8, 24), f"{lead}hidden_norm.weight": (8,), f"{lead}norm.weight": (8,)}
    per = (["self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"] if fused else
           ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
            "mlp.gate_proj.weight", "mlp.up_proj.weight"])
    for i in range(2):
        for r in per + ["self_attn.o_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight",
                        "post_attention_layernorm.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight"]:
            out[f"{lead}{layer}.{i}.{r}"] = (8, 8)
    return out


def test_layout_is_the_familys():
    """The names init maps onto are exactly the family's target layout (all optional tensors)."""
    fam = get_family("gqa_dflash")
    cfg = {**init_layout._probe(3)}
    names = list(fam.target_layout(cfg))
    assert [n for n in names if not n.startswith("layers.")] == list(LAYOUT.top)
    assert [n.removeprefix("layers.2.") for n in names if n.startswith("layers.2.")] == list(LAYOUT.layer)
    assert LAYOUT.container == "layers"
    assert {"markov_head.markov_w1.weight", "confidence_head.proj.bias"} <= set(LAYOUT.top)
    assert set(init_weights.KNOWN_RENAMES.values()) <= set(LAYOUT.top)


def test_layout_follows_a_changed_family():
    """A family whose layout holds another per-layer tensor, or names its layers otherwise: init
    follows it (nothing about the layout is restated in init)."""

    class Other(GQADFlash):
        def target_layout(self, cfg):
            out = {}
            for n, m in super().target_layout(cfg).items():
                out[n.replace("layers.", "blocks.")] = m
                if n.endswith("mlp.down_proj.weight"):
                    out[n.replace("layers.", "blocks.").replace("down_proj", "extra_proj")] = m
            return out

    got = init_layout.target_layout(Other())
    assert got.container == "blocks" and "mlp.extra_proj.weight" in got.layer
    assert got.fused["self_attn.qkv_proj.weight"].outputs[0] == "blocks.{i}.self_attn.q_proj.weight"


def test_fused_sizes_read_off_the_layout():
    f = LAYOUT.fused
    assert f["self_attn.qkv_proj.weight"].sizes == [["num_attention_heads", "head_dim"],
                                                    ["num_key_value_heads", "head_dim"],
                                                    ["num_key_value_heads", "head_dim"]]
    assert f["mlp.gate_up_proj.weight"].sizes == ["intermediate_size", "intermediate_size"]


def test_fused_biases_when_the_family_has_part_biases():
    """A family whose layout holds q/k/v biases: a fused qkv_proj.bias splits like the weight."""

    class Biased(GQADFlash):
        def target_layout(self, cfg):
            out = dict(super().target_layout(cfg))
            for n, m in list(out.items()):
                if n.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
                    out[n.removesuffix(".weight") + ".bias"] = TensorMeta(m.shape[:1], m.dtype)
            return out

    f = init_layout.target_layout(Biased()).fused
    assert f["self_attn.qkv_proj.bias"].sizes == f["self_attn.qkv_proj.weight"].sizes
    assert f["self_attn.qkv_proj.bias"].outputs[0] == "layers.{i}.self_attn.q_proj.bias"


def test_norm_regexes_cover_each_kind_once():
    """fold: the norms the engine runs plainly (compile/trtllm_limits.PLAIN_NORMS); keep: the others;
    each of the family's norm names matches exactly one; the shipped MiniMax spec agrees."""
    import re

    fold, keep = (init_layout.norm_regex(t, "layers") for t in (LAYOUT.fold, LAYOUT.keep))
    plain = init_layout.engine_plain_norms(list(get_family("gqa_dflash").norm_kinds))
    assert plain == {"hidden_norm", "k_norm"}
    for kind, t in get_family("gqa_dflash").norm_kinds.items():
        name = t.replace("{i}", "12")
        assert bool(re.search(fold, name)) == (kind in plain) and bool(re.search(keep, name)) == (kind not in plain)
    assert not re.search(keep, "layers.0.self_attn.q_norm.weightx") and not re.search(fold, "xhidden_norm.weight")
    shipped = yaml.safe_load(Path("adapters/minimax_dspark.yaml").read_text())["weights"]["transforms"]
    assert [fold, keep] == [t["match"] for t in shipped if t["op"] == "norm_fold_gemma"]


@pytest.mark.parametrize("layer,lead", [("layers", ""), ("blocks", ""), ("h", "drafter."),
                                        ("model.layers", "x.y."), ("transformer.h", "")])
def test_layer_names_under_any_naming(layer, lead):
    ck = view(dflash_names(layer, fused=True, lead=lead))
    assert {m.container for m in ck.layers.values()} == {layer}
    assert all(m.i in ("0", "1") for m in ck.layers.values())


def test_a_numbered_name_without_layer_modules_is_no_layer():
    ck = view({**dflash_names("layers", False), "markov.0.weight": (4, 4)})
    assert "markov.0.weight" not in ck.layers


@pytest.mark.parametrize("layer,lead", [("layers", ""), ("blocks", ""), ("h", "drafter."), ("model.layers", "m.")])
def test_renames_and_splits_for_fused_layers(layer, lead):
    ck = view(dflash_names(layer, fused=True, lead=lead) | {f"{lead}norm.weight": (8,)})
    say = init_read.Remarks()
    rules = init_weights.renames(ck, LAYOUT, say)
    if layer == "layers":
        assert [r.kind for r in rules] == (["prefix"] if lead else [])
    else:
        assert (rules[0].kind, rules[0].match, rules[0].to) == ("template", f"{lead}{layer}.{{i}}.{{rest*}}",
                                                                "layers.{i}.{rest*}")
    assert not any("unmapped" in t for t in say.todos), say.todos
    splits = init_weights.transforms(ck, LAYOUT, say)
    assert [t.params["input"] for t in splits] == ["layers.{i}.self_attn.qkv_proj.weight",
                                                  "layers.{i}.mlp.gate_up_proj.weight"]
    assert splits[0].match == r"^layers\.\d+\.self_attn\.qkv_proj\.weight$"
    assert say.todos == ["row order of the fused qkv_proj", "row order of the fused gate_up_proj"]


def test_renames_report_what_they_cannot_map():
    ck = view({**dflash_names("blocks", False), "blocks.0.self_attn.g_proj.weight": (4, 8), "extra.weight": (3,)})
    say = init_read.Remarks()
    init_weights.renames(ck, LAYOUT, say)
    assert say.todos == ["unmapped tensor extra.weight", "unmapped tensor blocks.0.self_attn.g_proj.weight"]
    ck = view({**dflash_names("blocks", False), **{k.replace("blocks", "layers"): v
                                                   for k, v in dflash_names("blocks", False).items()}})
    say = init_read.Remarks()
    assert init_weights.renames(ck, LAYOUT, say) == [] and "per-layer names disagree" in say.todos[0]


def test_mxfp8_rule_alone():
    names = {"layers.0.mlp.up_proj.weight": (8, 64), "layers.0.mlp.up_proj.weight_scale": (8, 2),
             "layers.0.mlp.down_proj.weight": (8, 64)}  # no scale companion
    ck = view(names, dtype=torch.float8_e4m3fn)
    ck.headers["layers.0.mlp.up_proj.weight_scale"] = TensorMeta((8, 2), torch.uint8)
    say = init_read.Remarks()
    (rule,) = init_weights.transforms(ck, LAYOUT, say)
    assert (rule.op, rule.match, rule.params) == ("dequant_mxfp8", r"\.(up_proj)\.weight$",
                                                  {"synth_scale_suffix": "_scale", "synth_scale_dtype": "uint8"})
    assert say.todos == ["F8_E4M3 tensors without scales"]
    ck.headers["layers.0.mlp.up_proj.weight_scale"] = TensorMeta((8, 4), torch.uint8)  # one per 16
    say = init_read.Remarks()
    assert init_weights.transforms(ck, LAYOUT, say) == [] and say.todos == ["unsupported FP8 scales"]


def test_fields_and_config_alone():
    raw = {"hidden_size": 8, "dspark_block_size": 7, "noise_token_id": 5, "ffn_hidden_size": 16,
           "quantization_config": {"block_size": 3}, "odd_key": 1}
    ck = view(dflash_names("layers", False) | {"markov_w1.weight": (10, 4)}, raw)
    found = init_config.aliases(ck.merged)
    assert found["dflash_config.block_size"] == ["dspark_block_size"]  # not quantization_config.block_size
    say = init_read.Remarks()
    cfg = init_config.config(ck, get_family("gqa_dflash"), found, [], say)
    dumped = cfg.model_dump(by_alias=True, exclude_unset=True)
    assert dumped["fields"]["intermediate_size"] == {"from": ["ffn_hidden_size"], "required": True}
    assert dumped["fields"]["dflash_config.target_layer_ids"] == {"from": [], "required": True}
    assert dumped["fields"]["dspark_config.markov_rank"] == {"default": 4}
    assert dumped["drop"] == ["quantization_config"]
    assert dumped["fixed"] == {"odd_key": 1, "quantization_config.block_size": 3}  # no transform reads them
    assert "irrelevant" not in dumped
    assert any("dflash_config.target_layer_ids" in t for t in say.todos)


def test_target_layer_ids_alone():
    ck = view({}, {"speculators_model_type": "dflash", "aux_hidden_state_layer_ids": [1]})
    say = init_read.Remarks()
    assert init_config.target_layer_ids(ck, init_config.aliases(ck.merged), say) == "input" and not say.todos
    ck = view({}, {"target_layer_ids": [1]})
    assert init_config.target_layer_ids(ck, init_config.aliases(ck.merged), say) == "output" and say.todos


def test_attention_alone():
    say = init_read.Remarks()
    fam = get_family("gqa_dflash")
    a = init_attention.attention(view({}, {"layer_types": ["sliding_attention"]}), fam, say)
    dumped = a.model_dump(exclude_unset=True)
    assert dumped.pop("lowering") == {k: {"sm100": "triton_window_block", "sm90": "triton_window_block",
                                          "cpu": "dense"} for k in ("windowed", "full")}
    assert dumped == {"windowed_causal": False, "full_causal": False, "window": None}
    assert len(say.todos) == 2
    say = init_read.Remarks()
    a = init_attention.attention(view({}, {"layer_types": ["sliding_attention"], "sliding_window": 4,
                                           "is_causal": False}), fam, say)
    assert "window" not in a.model_dump(exclude_unset=True) and not say.todos
    assert say.comments[("attention", "windowed_causal")] == "from is_causal in the config"


def test_assembly_is_a_spec(tmp_path, checkpoints):
    spec = AdapterSpec.model_validate(yaml.safe_load(infer(checkpoints("zlab_dflash").source, "z").yaml))
    assert spec.family == "gqa_dflash" and spec.name == "z"


@pytest.mark.parametrize("layer,lead", [("blocks", ""), ("h", "drafter."), ("model.layers", "m.")])
def test_init_recognises_fused_layers_under_other_names(layer, lead, tmp_path, capsys, checkpoints):
    """trtllm_dflash's synthetic checkpoint (fused qkv_proj) with its layers renamed: init's spec
    converts it to the same tensors as the shipped adapter converts the original."""
    ck = checkpoints("trtllm_dflash")
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_bytes((ck.source / "config.json").read_bytes())
    w = load_file(ck.source / "model.safetensors")
    save_file({lead + (n.replace("layers.", layer + ".", 1) if n.startswith("layers.") else n): t
               for n, t in w.items()}, str(src / "model.safetensors"))
    res = infer(src, "renamed")
    assert not any("unmapped" in t for t in res.todos), res.todos
    assert "row order of the fused qkv_proj" in res.todos
    (tmp_path / "renamed.yaml").write_text(res.yaml.replace('model: "', 'model: "x').replace(
        'description: "', 'description: "x'))
    assert main(["inspect", f"adapter={tmp_path / 'renamed.yaml'}", f"source={src}"]) == 0, capsys.readouterr().out
    plan = conversion_plan(load_adapter(str(tmp_path / "renamed.yaml")), src)
    got = load_file(execute(plan, tmp_path / "out", progress=False) / "model.safetensors")
    _, ref = read_checkpoint(ck.converted)
    assert sorted(got) == sorted(ref)
    assert all(torch.equal(got[n].view(torch.uint8), ref[n].view(torch.uint8)) for n in ref)


def test_no_function_over_60_lines():
    for path in sorted(STARTER.glob("*.py")):
        tree = ast.parse(path.read_text())
        long = [(f.name, f.end_lineno - f.lineno + 1) for f in ast.walk(tree)
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno + 1 > 60]
        assert not long, (path.name, long)
