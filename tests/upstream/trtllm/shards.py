"""The tensors one rank of TensorRT-LLM's tensor-parallel drafter holds after loading, computed by the
test from the converted checkpoint (independent of the loader under test)."""

import torch


def rank_slices(weights: dict, config: dict, tp: int, rank: int, dp: bool) -> dict:
    """What rank ``rank`` must hold after loading, by parameter name, computed here from the converted
    tensors (``weights``): q rows, k/v rows of this rank's KV head(s) (each KV head repeated over
    ``tp / kv_heads`` ranks when ``kv_heads < tp``), gate and up rows, o_proj / down_proj columns,
    everything else whole; under attention DP attention and MLP are whole (TensorRT-LLM's ``Attention``
    and ``GatedMLP`` run with tp 1 there)."""
    d = config["draftsmith"]["dims"]
    hd, heads, kv, inter = d["head_dim"], d["heads"], d["kv_heads"], d["intermediate"]
    t = 1 if dp else tp
    r = 0 if dp else rank

    def rows(x, start, n):
        return x[start:start + n]

    def kv_rows(x):
        if kv >= t:
            return rows(x, r * (kv // t) * hd, (kv // t) * hd)
        return rows(x, (r // (t // kv)) * hd, hd)

    out, backbone = {}, "draft_model_full.model."
    layers = {int(k.split(".")[1]) for k in weights if k.startswith("layers.")}
    for i in sorted(layers):
        p = f"layers.{i}."
        for kind in ("weight", "bias"):
            q = weights.get(f"{p}self_attn.q_proj.{kind}")
            if q is not None:
                out[f"{backbone}{p}self_attn.qkv_proj.{kind}"] = torch.cat([
                    rows(q, r * (heads // t) * hd, (heads // t) * hd),
                    kv_rows(weights[f"{p}self_attn.k_proj.{kind}"]), kv_rows(weights[f"{p}self_attn.v_proj.{kind}"])])
            g = weights.get(f"{p}mlp.gate_proj.{kind}")
            if g is not None:
                out[f"{backbone}{p}mlp.gate_up_proj.{kind}"] = torch.cat([
                    rows(g, r * (inter // t), inter // t), rows(weights[f"{p}mlp.up_proj.{kind}"], r * (inter // t), inter // t)])
        for proj, width in (("self_attn.o_proj", heads * hd), ("mlp.down_proj", inter)):
            out[f"{backbone}{p}{proj}.weight"] = weights[f"{p}{proj}.weight"][:, r * (width // t):(r + 1) * (width // t)]
            if f"{p}{proj}.bias" in weights:
                out[f"{backbone}{p}{proj}.bias"] = weights[f"{p}{proj}.bias"]
    fused = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    heads_attr = {"markov_head.markov_w1.weight": "markov_w1", "markov_w1.weight": "markov_w1",
                  "markov_head.markov_w2.weight": "markov_w2", "markov_w2.weight": "markov_w2",
                  "confidence_head.proj.weight": "confidence_proj_weight", "confidence_proj.weight": "confidence_proj_weight",
                  "confidence_head.proj.bias": "confidence_proj_bias", "confidence_proj.bias": "confidence_proj_bias"}
    for k, v in weights.items():
        parts = k.split(".")
        if k in ("fc.weight", "hidden_norm.weight") or k.startswith("candidate_selector."):
            out[k] = v
        elif k in heads_attr:
            out[heads_attr[k]] = v
        elif k.startswith("layers.") and parts[2] in ("attention_conv", "mlp_conv"):
            out[f"{parts[2]}s.{parts[1]}.{'.'.join(parts[3:])}"] = v
        elif k.startswith("layers.") and parts[-2] not in fused:
            out[backbone + k] = v
        elif k == "norm.weight":
            out[backbone + k] = v
        elif not k.startswith("layers."):
            raise AssertionError(f"converted tensor {k}: the test has no rule for it")
    return out
