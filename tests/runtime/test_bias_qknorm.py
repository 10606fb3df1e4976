"""No silent math (issue 36, point 5): biases (``attention_bias``, ``mlp_bias``) and a drafter
without q/k norms (spec ``layout.qk_norm: false``) are carried through conversion and the torch
host, checked against the float64 oracle of ``oracles.py``; a planted error (biases dropped,
q/k norms applied where the drafter has none) moves the logits far off it."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.framework.convert.execute import convert
from draftsmith.framework.convert.plan import plan as conversion_plan
from draftsmith.framework.convert.synth import synthesize
from draftsmith.framework.errors import UserError
from draftsmith.framework.runtime import get_host
from draftsmith.framework.runtime.loading import build_drafter
from support.helpers import read_checkpoint
from support.oracles import draft_oracle
from support.numerics import rel  # noqa: E402

CONTEXT = 21
BIASES = ["synth.config.attention_bias=true", "+synth.config.mlp_bias=true"]
NO_QK_NORM = ["layout.qk_norm=false"]


def _convert(tmp, overrides):
    a = load_adapter("zlab_dflash", overrides)
    synthesize(a, "tiny", tmp / "S", seed=5)
    convert(a, tmp / "S", tmp / "T", progress=False)
    return a


def _host_logits(ckpt, target, hidden, anchor):
    model, _ = build_drafter(get_host("torch").model_cls, ckpt, target, torch.device("cpu"), torch.float32, None)
    cache = model.make_cache(1, page_size=8, max_context=CONTEXT)
    cache.advance(0, 0)
    model.append_context(cache, hidden.float(), seq=0)
    return model.draft(torch.tensor([anchor]), cache).logits[0].double()


def _case(tmp, overrides):
    _convert(tmp, overrides)
    cfg, w = read_checkpoint(tmp / "T")
    tgt = load_file(tmp / "S" / "target" / "model.safetensors")
    r = R.from_config(cfg)
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(CONTEXT, r.dims.num_target_layers * r.dims.target_hidden, generator=g, dtype=torch.float64)
    return cfg, w, tgt, hidden, 7


def test_biases_carried_host_matches_oracle(tmp_path):
    cfg, w, tgt, hidden, anchor = _case(tmp_path, BIASES)
    r = R.from_config(cfg)
    assert r.attention_bias and r.mlp_bias and r.sources["attention_bias"] == "config.json: attention_bias"
    for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        assert f"layers.1.{name}.bias" in w
    _, want, _ = draft_oracle(cfg, w, tgt, hidden, anchor)
    got = _host_logits(tmp_path / "T", tmp_path / "S" / "target", hidden, anchor)
    assert rel(got, want) < 1e-4
    # planted: the same checkpoint without its biases drafts other numbers (the biases matter)
    _, unbiased, _ = draft_oracle(cfg, {k: v for k, v in w.items() if not k.endswith("proj.bias")}, tgt, hidden, anchor)
    assert rel(unbiased, want) > 0.05


def test_bias_record_dropped_is_refused_by_host(tmp_path):
    """A record that says no bias while the checkpoint holds them is not loaded silently."""
    _convert(tmp_path, BIASES)
    cfg = json.loads((tmp_path / "T" / "config.json").read_text())
    cfg["draftsmith"]["attention_bias"] = False
    (tmp_path / "T" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="unexpected .*q_proj.bias"):
        build_drafter(get_host("torch").model_cls, tmp_path / "T", tmp_path / "S" / "target", "cpu", torch.float32)


def test_bias_tensors_dropped_by_rule_are_refused(tmp_path):
    """``attention_bias: true`` with a rename rule dropping the biases (``to: null``): the plan is
    incomplete (the family's layout wants them), never a silent unbiased conversion."""
    a = load_adapter("zlab_dflash", BIASES)
    synthesize(a, "tiny", tmp_path / "S", seed=5)
    drop = load_adapter("zlab_dflash", [*BIASES, "weights.rename=[{kind: regex, match: '^(.*_proj)\\.bias$', to: null}]"])
    plan = conversion_plan(drop, tmp_path / "S")
    assert not plan.complete
    assert "self_attn.q_proj.bias | MISSING" in plan.report()


def test_no_qk_norm_host_matches_oracle(tmp_path):
    cfg, w, tgt, hidden, anchor = _case(tmp_path, NO_QK_NORM)
    assert not R.from_config(cfg).qk_norm
    assert not any(k.endswith(("q_norm.weight", "k_norm.weight")) for k in w)
    _, want, _ = draft_oracle(cfg, w, tgt, hidden, anchor)
    got = _host_logits(tmp_path / "T", tmp_path / "S" / "target", hidden, anchor)
    assert rel(got, want) < 1e-4
    # planted: the same weights run with unit q/k norms (what a layout requiring them would do)
    d = cfg["head_dim"]
    normed = dict(w, **{f"layers.{i}.self_attn.{n}_norm.weight": torch.ones(d) for i in range(cfg["num_hidden_layers"])
                        for n in "qk"})
    _, planted, _ = draft_oracle(cfg, normed, tgt, hidden, anchor)
    assert rel(planted, want) > 0.05


def test_bias_key_must_be_boolean(tmp_path):
    a = load_adapter("zlab_dflash", ["synth.config.attention_bias=1"])
    with pytest.raises(UserError, match="attention_bias: 1 must be true or false"):
        synthesize(a, "tiny", tmp_path / "S", seed=5)


@pytest.mark.parametrize("to, overrides", [("trtllm_dflash", BIASES), ("speculators_dflash", BIASES[:1])])
def test_biases_survive_export(tmp_path, to, overrides):
    """An export carries ``attention_bias`` / ``mlp_bias`` and the bias tensors (TensorRT-LLM's
    layout fuses q/k/v biases into ``qkv_proj.bias`` as it fuses the weights); converted back,
    every tensor is the source's."""
    from draftsmith.framework.convert.export import export

    a = _convert(tmp_path, overrides)
    x = export(a, tmp_path / "S", tmp_path / "X", to, verifier="v")
    raw = json.loads((x / "config.json").read_text())
    assert raw.get("attention_bias", raw.get("transformer_layer_config", {}).get("attention_bias")) is True
    back = load_adapter(to)
    convert(back, x, tmp_path / "B", progress=False)
    _, w0 = read_checkpoint(tmp_path / "T")
    cfg1, w1 = read_checkpoint(tmp_path / "B")
    assert R.from_config(cfg1).attention_bias and R.from_config(cfg1).mlp_bias == (len(overrides) == 2)
    assert w0.keys() == w1.keys()
    for k in w0:
        assert torch.equal(w0[k], w1[k]), k


def test_no_qk_norm_export_refused_where_the_format_has_them(tmp_path):
    from draftsmith.framework.convert.export import export

    a = _convert(tmp_path, NO_QK_NORM)
    with pytest.raises(UserError, match="q/k norms"):
        export(a, tmp_path / "S", tmp_path / "X", "trtllm_dflash")


def test_mlp_bias_export_refused_where_the_format_has_none(tmp_path):
    """z-lab's and speculators' Qwen3 MLP has no biases: exporting them there is refused."""
    from draftsmith.framework.convert.export import export

    a = _convert(tmp_path, BIASES)
    with pytest.raises(UserError, match="MLP biases"):
        export(a, tmp_path / "S", tmp_path / "X", "speculators_dflash", verifier="v")
