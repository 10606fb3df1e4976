"""RoPE scaling (linear, YaRN, llama3) in the reference host, against float64 formulas written
here from the papers, and against transformers' own ``ROPE_INIT_FUNCTIONS`` (conformance).

- YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language Models",
  arXiv:2309.00071, sections 3.2-3.4): dimension ``i`` has ``theta_i = b^(-2i/d)``, wavelength
  ``lambda_i = 2 pi / theta_i`` and turns ``r_i = L / lambda_i`` times over the original context
  ``L``. The paper's "NTK-by-parts" blend is ``h(theta_i) = (1 - gamma) theta_i / s + gamma theta_i``
  with ``gamma = 1`` where ``r_i > beta`` (beta_fast), ``gamma = 0`` where ``r_i < alpha``
  (beta_slow); the attention temperature is ``sqrt(1/t) = 0.1 ln s + 1`` (eq. 22). Between the two
  the paper's text ramps in ``r``; the authors' released code (jquesnelle/yarn ``scaled_rope``,
  ``_yarn_find_correction_range`` / ``_yarn_linear_ramp_mask``), which trained checkpoints and
  transformers / vLLM / TensorRT-LLM follow, ramps linearly in the dimension index between the
  (fractional) dims where ``r = beta`` and ``r = alpha``, rounded outward. The oracle below
  follows the released code inside the ramp and checks the paper's two outer regions apart.
- llama3: Meta's ``apply_scaling`` (meta-llama/llama-models, Llama 3.1): per frequency,
  wavelength below ``L / high_freq_factor`` kept, above ``L / low_freq_factor`` divided by the
  factor, in between ``(1 - a) f / s + a f`` with ``a = (L / wavelength - low) / (high - low)``.
- linear (Chen et al. 2023, position interpolation): positions divided by ``s``, i.e. ``f / s``.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.converted_config import flatten
from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.convert.execute import convert
from draftsmith.framework.convert.synth import source_config, synthesize
from draftsmith.framework.errors import UserError
from draftsmith.framework.runtime.draft import run_draft
from draftsmith.framework.runtime.modules import PartialNeoxRope
from draftsmith.framework.runtime.rope import rope_frequencies
from support.helpers import read_checkpoint
from support.oracles import draft_oracle


# ---- the oracles (float64, from the papers; no draftsmith code) -------------------------------

def yarn_oracle(b, d, s, L, beta_fast=32.0, beta_slow=1.0, truncate=True, attention_factor=None, mscale=None,
                mscale_all_dim=None):
    def rotations_dim(r):  # the (fractional) dimension index whose r_i equals r
        return d * math.log(L / (2 * math.pi * r)) / (2 * math.log(b))

    lo, hi = rotations_dim(beta_fast), rotations_dim(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if hi == lo:
        hi += 0.001
    out = []
    for i in range(d // 2):
        th = b ** (-2 * i / d)
        interp = min(max((i - lo) / (hi - lo), 0.0), 1.0)  # 0: keep theta_i, 1: theta_i / s
        out.append((1 - interp) * th + interp * th / s)

    def temp(m):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1

    if attention_factor is None:
        attention_factor = temp(mscale) / temp(mscale_all_dim) if mscale and mscale_all_dim else temp(1.0)
    return torch.tensor(out, dtype=torch.float64), attention_factor


def llama3_oracle(b, d, s, L, low, high):
    out = []
    for i in range(d // 2):
        f = b ** (-2 * i / d)
        wl = 2 * math.pi / f
        if wl < L / high:
            out.append(f)
        elif wl > L / low:
            out.append(f / s)
        else:
            a = (L / wl - low) / (high - low)
            out.append((1 - a) * f / s + a * f)
    return torch.tensor(out, dtype=torch.float64), 1.0


def linear_oracle(b, d, s):
    return torch.tensor([b ** (-2 * i / d) / s for i in range(d // 2)], dtype=torch.float64), 1.0


def oracle_of(theta, d, rope: dict):
    kind = rope.get("rope_type", rope.get("type"))
    p = {k: v for k, v in rope.items() if k not in ("rope_type", "type", "rope_theta")}
    if kind == "yarn":
        L = p.pop("original_max_position_embeddings")
        return yarn_oracle(theta, d, p.pop("factor"), L, **p)
    if kind == "llama3":
        return llama3_oracle(theta, d, p["factor"], p["original_max_position_embeddings"], p["low_freq_factor"],
                             p["high_freq_factor"])
    assert kind == "linear"
    return linear_oracle(theta, d, p["factor"])


# ---- cases ------------------------------------------------------------------------------------

CASES = {
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    "yarn-betas-notrunc": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096,
                           "beta_fast": 16, "beta_slow": 2, "truncate": False},
    "yarn-mscale": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                    "mscale": 1.0, "mscale_all_dim": 0.707},
    "yarn-attention-factor": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048,
                              "attention_factor": 1.25},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192},
    "llama3-short": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                     "original_max_position_embeddings": 64},
    "linear": {"rope_type": "linear", "factor": 3.0},
}


def flat(rope: dict, layout: str, theta=500000.0, edit=None):
    """The zlab tiny config with ``rope`` written as transformers 4 (top-level ``rope_scaling``
    with ``type``) or transformers 5 (``rope_parameters``) would, flattened by draftsmith."""
    a = load_adapter("zlab_dflash")
    raw = copy.deepcopy(source_config(a, "tiny"))
    write_rope(raw, rope, layout, theta)
    if edit:
        edit(raw)
    return flatten(a, raw)


def write_rope(raw: dict, rope: dict, layout: str, theta: float) -> None:
    raw.pop("rope_theta", None)
    if layout == "transformers4":
        scaling = {("type" if k == "rope_type" else k): v for k, v in rope.items()}
        raw.update(rope_theta=theta, rope_scaling=scaling)
    else:
        raw["rope_parameters"] = {"rope_theta": theta, **rope}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("layout", ["transformers4", "transformers5"])
def test_frequencies_match_the_papers(case, layout):
    rope = CASES[case]
    r = ResolvedDrafter.from_config(flat(rope, layout))
    assert r.rope.type == rope["rope_type"]
    d = r.dims.rotary_dim
    want, want_m = oracle_of(500000.0, d, rope)
    inv, m = rope_frequencies(r.rope.theta, d, r.rope.type, r.rope.scaling)
    assert inv.dtype == torch.float64
    torch.testing.assert_close(inv, want, rtol=1e-13, atol=0)
    assert m == pytest.approx(want_m, rel=1e-13)
    base = 500000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    assert not torch.allclose(inv, base)  # the scaling changes the frequencies (the check can fail)
    if rope["rope_type"] == "yarn":  # the paper's outer regions: r > beta_fast kept, r < beta_slow divided by s
        r_i = rope["original_max_position_embeddings"] * base / (2 * math.pi)
        fast, slow = rope.get("beta_fast", 32), rope.get("beta_slow", 1)
        outer = (r_i > fast + 1e-9) | (r_i < slow - 1e-9)
        paper = torch.where(r_i > fast, base, base / rope["factor"])
        assert bool(outer.any())
        # the released code's rounding can widen the ramp by under one dimension on each side
        lo = d * math.log(rope["original_max_position_embeddings"] / (2 * math.pi * fast)) / (2 * math.log(500000.0))
        hi = d * math.log(rope["original_max_position_embeddings"] / (2 * math.pi * slow)) / (2 * math.log(500000.0))
        i = torch.arange(d // 2)
        far = outer & ((i < math.floor(lo)) | (i > math.ceil(hi)))
        assert bool(far.any()), "no dimension outside the ramp: the paper check would check nothing"
        torch.testing.assert_close(inv[far], paper[far], rtol=1e-13, atol=0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_transformers_rope_init_functions_agree(case):
    """Conformance: transformers' own ``ROPE_INIT_FUNCTIONS`` (float32) give the same inv_freq
    and attention factor for the same config."""
    tr = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = CASES[case]
    cfg = flat(rope, "transformers5")
    r = ResolvedDrafter.from_config(cfg)
    hf = tr.Qwen3Config(hidden_size=cfg["hidden_size"], num_attention_heads=cfg["num_attention_heads"],
                        num_key_value_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"],
                        max_position_embeddings=rope.get("original_max_position_embeddings", 4096),
                        rope_parameters={"rope_theta": 500000.0, **rope})
    inv_hf, m_hf = ROPE_INIT_FUNCTIONS[rope["rope_type"]](hf, "cpu")
    inv, m = rope_frequencies(r.rope.theta, r.dims.rotary_dim, r.rope.type, r.rope.scaling)
    torch.testing.assert_close(inv.float(), inv_hf.float(), rtol=2e-6, atol=0)
    assert m == pytest.approx(float(m_hf), rel=1e-6)


def test_documented_defaults_are_reported(tmp_path, capsys):
    """YaRN's optional beta_fast / beta_slow / truncate take transformers' documented defaults,
    listed in the loading report; the derived attention factor is named as derived."""
    r = ResolvedDrafter.from_config(flat(CASES["yarn"], "transformers5"))
    assert r.rope.scaling["beta_fast"] == 32 and r.rope.scaling["beta_slow"] == 1 and r.rope.scaling["truncate"]
    assert r.sources["rope.scaling.attention_factor"].startswith("derived")
    synthesize(load_adapter("zlab_dflash"), "tiny", tmp_path / "s", seed=1)
    p = tmp_path / "s" / "config.json"
    raw = json.loads(p.read_text())
    write_rope(raw, CASES["yarn"], "transformers5", 1e6)
    p.write_text(json.dumps(raw))
    capsys.readouterr()
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 't'}"]) == 0
    block = capsys.readouterr().out.split("defaults (not in config.json): ", 1)[1]
    for key in ("beta_fast = 32.0", "beta_slow = 1.0", "truncate = True"):
        assert f"  rope.scaling.{key}  (transformers 5.19 modeling_rope_utils documented default" in block, key
    assert "attention_factor" not in block  # a derivation, not a default
    stated = dict(CASES["yarn"], beta_fast=32, beta_slow=1, truncate=True)
    assert not any(k.startswith("rope.scaling.b") for k in
                   ResolvedDrafter.from_config(flat(stated, "transformers5")).sources)


@pytest.mark.parametrize("rope, edit, message", [
    ({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
     None, "needs rope_parameters.low_freq_factor"),
    ({"rope_type": "yarn", "factor": 4.0}, None, "needs rope_parameters.original_max_position_embeddings"),
    ({"rope_type": "linear"}, None, "needs rope_parameters.factor"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fastt": 32}, None,
     "rope_parameters.beta_fastt is not a parameter of rope_type 'yarn'"),
    ({"rope_type": "linear", "factor": 0.5}, None, "factor must be >= 1"),
    ({"rope_type": "yarn", "factor": "4", "original_max_position_embeddings": 64}, None,
     "rope_parameters.factor must be a positive number"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, None, "high_freq_factor 4.0 must be greater than low_freq_factor"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64.5}, None,
     "original_max_position_embeddings must be an integer in 1.."),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 10**400}, None,
     "original_max_position_embeddings must be an integer in 1.."),
    ({"rope_type": "yarn", "factor": float("inf"), "original_max_position_embeddings": 64}, None,
     "rope_parameters.factor must be a positive number"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 1.0}, None,
     "needs rope_theta > 1"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
     lambda raw: raw.update(original_max_position_embeddings=128), "original_max_position_embeddings is given twice"),
    ({"rope_type": "default", "factor": 4.0}, None, "rope_parameters.factor is not a parameter of rope_type 'default'"),
])
def test_bad_scaling_refused_in_one_line(rope, edit, message):
    with pytest.raises(UserError) as e:
        flat(rope, "transformers5", edit=edit)
    (line,) = e.value.problems
    assert message in line, line


def test_top_level_original_max_position_embeddings_read():
    """Phi-3 style: ``original_max_position_embeddings`` beside ``rope_scaling`` (transformers
    prefers that one)."""
    rope = {"rope_type": "yarn", "factor": 4.0}
    r = ResolvedDrafter.from_config(flat(rope, "transformers4",
                                         edit=lambda raw: raw.update(original_max_position_embeddings=1024)))
    assert r.rope.scaling["original_max_position_embeddings"] == 1024


def test_stored_incomplete_scaling_refused():
    cfg = flat(CASES["llama3"], "transformers5")
    del cfg["draftsmith"]["rope"]["scaling"]["low_freq_factor"]
    with pytest.raises(UserError, match="needs draftsmith.rope.scaling.low_freq_factor"):
        ResolvedDrafter.from_config(cfg)


@pytest.mark.parametrize("case, layout", [("yarn-mscale", "transformers4"), ("llama3-short", "transformers5"),
                                          ("linear", "transformers5")])
def test_scaled_drafter_drafts_like_the_oracle(case, layout, tmp_path):
    """A scaled drafter converts and drafts equal to the float64 oracle run with the paper's
    frequencies; the unscaled oracle is far off (the check can fail)."""
    adapter = load_adapter("zlab_dflash")
    synthesize(adapter, "tiny", tmp_path / "S", seed=11)
    p = tmp_path / "S" / "config.json"
    raw = json.loads(p.read_text())
    rope = dict(CASES[case], original_max_position_embeddings=16) if case.startswith("yarn") else CASES[case]
    write_rope(raw, rope, layout, 10000.0)
    p.write_text(json.dumps(raw))
    convert(adapter, tmp_path / "S", tmp_path / "T", progress=False)
    cfg, w = read_checkpoint(tmp_path / "T")
    dump = tmp_path / "step.safetensors"
    run_draft(tmp_path / "T", tmp_path / "S" / "target", context=37, seed=3, dtype="float32", dump=dump, repeats=1)
    d = load_file(dump)
    tgt = load_file(tmp_path / "S" / "target" / "model.safetensors")
    oracle_cfg = dict(cfg, rope_theta=10000.0)
    freqs = oracle_of(10000.0, cfg["rotary_dim"], rope)
    toks, logits, _ = draft_oracle(oracle_cfg, w, tgt, d["inputs.target_hidden"], int(d["inputs.anchor"][0]),
                                   rope_freqs=freqs)
    scale = logits.abs().max()
    assert ((d["outputs.logits"].double() - logits).abs().max() / scale).item() < 1e-4
    assert torch.equal(d["outputs.tokens"], toks)
    _, plain, _ = draft_oracle(oracle_cfg, w, tgt, d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    assert ((plain - logits).abs().max() / scale).item() > 1e-2


def test_partial_rope_attention_factor_scales_rotated_dims_only():
    rope = PartialNeoxRope(8, 4, 1e4, rope_type="yarn", scaling=dict(
        factor=4.0, original_max_position_embeddings=16, beta_fast=32.0, beta_slow=1.0, truncate=True,
        attention_factor=1.5))
    x = torch.randn(3, 2, 8)
    out = rope(x, torch.zeros(3, dtype=torch.long))  # position 0: the rotation is the identity
    torch.testing.assert_close(out[..., :4], 1.5 * x[..., :4])
    torch.testing.assert_close(out[..., 4:], x[..., 4:])


def test_emit_refuses_a_scaled_drafter(tmp_path, capsys):
    adapter = load_adapter("zlab_dflash")
    synthesize(adapter, "tiny", tmp_path / "S", seed=2)
    p = tmp_path / "S" / "config.json"
    raw = json.loads(p.read_text())
    write_rope(raw, CASES["llama3"], "transformers5", 1e6)
    p.write_text(json.dumps(raw))
    convert(adapter, tmp_path / "S", tmp_path / "T", progress=False)
    capsys.readouterr()
    assert main(["emit", "adapter=zlab_dflash", "target=trtllm", f"out={tmp_path / 'pkg'}",
                 f"config={tmp_path / 'T'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rope_type 'llama3'" in err[0] and "RopeParams" in err[0], err
    assert not (tmp_path / "pkg").exists() or not any((tmp_path / "pkg").iterdir())


@pytest.mark.parametrize("case", ["default", "linear", "yarn", "llama3"])
def test_emit_refuses_every_rope_trtllms_loader_keeps_as_scaling(case, tmp_path, capsys):
    """TensorRT-LLM's own ``load_pretrained_config`` (excerpt, NVIDIA config_utils.py @ 00679c66, run
    on the converted config.json with this interpreter's transformers) keeps ``rope_scaling`` for a
    real scaling (its models hand it to ``RopeParams.from_config``) and clears a plain one. The
    emitted backbone passes only ``dim``/``theta`` to ``RopeParams`` (``emit/trtllm_backbone.py``),
    so it would run every scaling TensorRT-LLM keeps unscaled: emit refuses exactly those, in one
    line naming the rope type, and emits the plain one."""
    import transformers

    from support.trtllm_shim import loader

    rope = {"rope_type": "default"} if case == "default" else CASES[case]
    converted = tmp_path / "T"
    converted.mkdir()
    (converted / "config.json").write_text(json.dumps(flat(rope, "transformers5")))
    theirs = loader().config_utils(transformers)["load_pretrained_config"](str(converted))
    scaled = theirs.rope_scaling is not None
    assert scaled == (case != "default")  # the oracle says what it should (the check can fail both ways)
    capsys.readouterr()
    rc = main(["emit", "adapter=zlab_dflash", "target=trtllm", f"out={tmp_path / 'pkg'}", f"config={converted}"])
    err = capsys.readouterr().err.strip().splitlines()
    if scaled:
        assert rc == 2 and len(err) == 1 and f"rope_type {case!r}" in err[0] and "RopeParams" in err[0], (rc, err)
        assert not (tmp_path / "pkg").exists() or not any((tmp_path / "pkg").iterdir())
    else:
        assert rc == 0, err


def test_packaged_drafter_refuses_a_scaled_checkpoint(tmp_path):
    """A package emitted for an unscaled drafter, bound at serve time to a scaled checkpoint."""
    from draftsmith.framework.emit.binding import PackagedDrafter

    assert main(["emit", "adapter=zlab_dflash", "target=trtllm", f"out={tmp_path / 'pkg'}"]) == 0
    packaged = PackagedDrafter.from_package(tmp_path / "pkg" / "draftsmith_zlab_dflash")
    assert packaged.bind(flat({"rope_type": "default"}, "transformers5")).resolved.rope.type == "default"
    with pytest.raises(ValueError, match="rope_type 'yarn' .*RopeParams"):
        packaged.bind(flat(CASES["yarn"], "transformers5"))


def test_fused_path_applies_the_scaled_frequencies_and_factor(monkeypatch):
    """On CUDA the layer calls ``fused.norm_rope`` (norm + rotation by the given ``inv_freq``)
    and then scales the rotated dims by the attention factor. Here the kernel is replaced by
    a float64 stand-in of its contract, so the wiring is checked on CPU: the fused branch
    equals the eager one for a YaRN drafter."""
    from draftsmith.framework.runtime import layers as layers_mod
    from draftsmith.framework.runtime.layers import DFlashAttention, LayerShape

    def kernel(x, weight, eps, gemma, pos, inv_freq, rot):  # fused.norm_rope's contract
        xd = x.double()
        y = xd / torch.sqrt((xd * xd).mean(-1, keepdim=True) + eps) * (weight.double() + (1.0 if gemma else 0.0))
        ang = pos.double()[..., None, None] * inv_freq.double()
        c, s_ = ang.cos(), ang.sin()
        h = rot // 2
        a, b = y[..., :h], y[..., h:rot]
        return torch.cat([a * c - b * s_, b * c + a * s_, y[..., rot:]], -1).to(x.dtype)

    scaling = dict(factor=4.0, original_max_position_embeddings=16, beta_fast=32.0, beta_slow=1.0, truncate=True,
                   attention_factor=1.3)
    rope = PartialNeoxRope(16, 8, 1e4, rope_type="yarn", scaling=scaling)
    s = LayerShape(hidden=32, heads=2, kv_heads=1, head_dim=16, rotary_dim=8, rope_theta=1e4, eps=1e-6,
                   inter=8, mlp="swiglu", alpha=0.0, limit=0.0)
    attn = DFlashAttention(s, False, False, rope)
    with torch.no_grad():
        attn.q_norm.weight.copy_(1 + 0.1 * torch.randn(16))
    x = torch.randn(5, 2, 16, dtype=torch.float64)
    pos = torch.arange(20, 25)
    eager = attn.norm_rope(attn.q_norm.double(), x, pos)
    monkeypatch.setattr(layers_mod.fused, "enabled", lambda t: True)
    monkeypatch.setattr(layers_mod.fused, "norm_rope", kernel)
    fused_out = attn.norm_rope(attn.q_norm, x, pos)
    torch.testing.assert_close(fused_out, eager, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(fused_out[..., :8], kernel(x, attn.q_norm.weight, 1e-6, False, pos, rope.inv_freq, 8)[..., :8])
