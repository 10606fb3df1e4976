"""Every shipped adapter, end to end: synth (tiny) -> convert -> build -> load_weights ->
one draft step, against an independent float64 implementation of reference section 1
that reads only the converted tensors and the flattened config (no host code)."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.adapters import ADAPTER_DIR
from draftsmith.framework.convert import execute
from draftsmith.framework.draft import run_draft
from draftsmith.framework.engine import load_adapter
from draftsmith.framework.synth import synthesize
from helpers import read_checkpoint as load_converted

ADAPTERS = sorted(p.stem for p in ADAPTER_DIR.glob("*.yaml"))




def oracle(cfg, w, tgt, hidden, anchor):
    """float64 draft step of one sequence whose context is ``hidden`` at positions 0..C-1."""
    w = {k: v.double() for k, v in w.items()}
    h, hq, hkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    rot, theta, eps = cfg["rotary_dim"], cfg["rope_theta"], cfg["rms_norm_eps"]
    norms, ds = cfg["draftsmith"]["norms"], cfg["dspark_config"]
    bsz = cfg["dflash_config"]["block_size"]

    def norm(x, wt, kind):
        y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return y * (1.0 + wt) if norms[kind] == "gemma" else y * wt

    def rope(x, pos):
        inv = 1.0 / theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
        a = pos.double()[:, None, None] * inv
        x1, x2, rest = x[..., : rot // 2], x[..., rot // 2 : rot], x[..., rot:]
        return torch.cat([x1 * a.cos() - x2 * a.sin(), x2 * a.cos() + x1 * a.sin(), rest], -1)

    def act(g, u):
        if cfg["hidden_act"] == "silu":
            return torch.nn.functional.silu(g) * u
        lim, al = cfg["swiglu_limit"], cfg["swiglu_alpha"]
        g, u = g.clamp(max=lim), u.clamp(-lim, lim)
        return g * torch.sigmoid(al * g) * (u + 1)

    C = hidden.shape[0]
    ctx = norm(hidden.double() @ w["fc.weight"].T, w["hidden_norm.weight"], "hidden_norm")
    ids = [anchor] + [cfg["dflash_config"]["mask_token_id"]] * (bsz - 1)
    x = tgt["model.embed_tokens.weight"].double()[ids]
    pc, pb = torch.arange(C), torch.arange(C, C + bsz)
    for i, lay in enumerate(cfg["draftsmith"]["layers"]):
        p = f"layers.{i}."
        y = norm(x, w[p + "input_layernorm.weight"], "input_layernorm")
        proj = lambda t, n: t @ w[p + f"self_attn.{n}_proj.weight"].T  # noqa: E731
        q = rope(norm(proj(y, "q").view(bsz, hq, d), w[p + "self_attn.q_norm.weight"], "q_norm"), pb)
        k = torch.cat([rope(norm(proj(ctx, "k").view(C, hkv, d), w[p + "self_attn.k_norm.weight"], "k_norm"), pc),
                       rope(norm(proj(y, "k").view(bsz, hkv, d), w[p + "self_attn.k_norm.weight"], "k_norm"), pb)])
        v = torch.cat([proj(ctx, "v").view(C, hkv, d), proj(y, "v").view(bsz, hkv, d)])
        qp, kp = pb[:, None], torch.cat([pc, pb])[None, :]
        ok = torch.ones(bsz, C + bsz, dtype=torch.bool)
        if lay["causal"]:
            ok &= kp <= qp
        if lay["window"] is not None:
            ok &= (qp - kp).abs() <= lay["window"] - 1
        out = torch.empty(bsz, hq, d, dtype=torch.float64)
        for head in range(hq):
            g = head // (hq // hkv)
            s = (q[:, head] @ k[:, g].T / math.sqrt(d)).masked_fill(~ok, -math.inf)
            out[:, head] = torch.softmax(s, -1) @ v[:, g]
        x = x + out.reshape(bsz, hq * d) @ w[p + "self_attn.o_proj.weight"].T
        y = norm(x, w[p + "post_attention_layernorm.weight"], "post_attention_layernorm")
        x = x + act(y @ w[p + "mlp.gate_proj.weight"].T, y @ w[p + "mlp.up_proj.weight"].T) @ w[p + "mlp.down_proj.weight"].T
    z = norm(x, w["norm.weight"], "norm")
    logits = z @ tgt["lm_head.weight"].double().T
    slots = range(bsz) if ds["sample_from_anchor"] else range(1, bsz)
    prev, toks, rows, confs = anchor, [], [], []
    for j in slots:
        row = logits[j].clone()
        if ds["markov_rank"]:
            row += w["markov_head.markov_w2.weight"] @ w["markov_head.markov_w1.weight"][prev]
        if ds["enable_confidence_head"]:
            feat = z[j]
            if ds["confidence_head_with_markov"]:
                feat = torch.cat([feat, w["markov_head.markov_w1.weight"][prev]])
            confs.append(torch.sigmoid(feat @ w["confidence_head.proj.weight"][0] + w["confidence_head.proj.bias"][0]))
        prev = int(row.argmax())
        toks.append(prev)
        rows.append(row)
    return toks, torch.stack(rows), (torch.stack(confs) if confs else None)


@pytest.mark.parametrize("name", ADAPTERS)
@pytest.mark.parametrize("context", [5, 29])
def test_adapter_end_to_end(name, context, tmp_path):
    adapter = load_adapter(name)
    seed = 1000 + context + len(name)
    synthesize(adapter, "tiny", tmp_path / "S", seed=seed)
    execute(adapter.plan(tmp_path / "S"), tmp_path / "T", progress=False)
    dump = tmp_path / "step.safetensors"
    rep = run_draft(tmp_path / "T", tmp_path / "S" / "target", device="cpu", context=context, seed=seed,
                    batch=2, dtype="float32", dump=dump)
    cfg, w = load_converted(tmp_path / "T")
    tgt = load_file(tmp_path / "S" / "target" / "model.safetensors")
    d = load_file(dump)
    assert d["inputs.target_hidden"].shape[0] == context
    toks, logits, conf = oracle(cfg, w, tgt, d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    got = d["outputs.logits"].double()
    rel = ((got - logits).abs().max() / logits.abs().max()).item()
    assert rel < 1e-4, f"{name}: logits off by {rel:.2e} relative"
    assert d["outputs.tokens"].tolist() == toks
    assert rep.tokens[0].tolist() == toks
    if conf is not None:
        torch.testing.assert_close(d["outputs.confidence"].double(), conf, rtol=1e-4, atol=1e-6)
    assert rep.tokens.shape == (2, cfg["draftsmith"]["max_draft_len"])
