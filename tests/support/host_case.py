"""The tiny hand-built drafter the host, emit and KV-cache tests share: its dims, per-layer
masks and lowering table, a config in the DFlash target layout (:func:`make_config`), random
weights and target tensors, a checkpoint writer, a host builder and the comparison against
the float64 oracle (``support.oracles.draft_oracle``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from draftsmith.framework.compile.resolved import Dims, Heads, LayerPlan, Mlp, ResolvedDrafter, Rope
from draftsmith.framework.runtime import DFlashDraftModel
from draftsmith.lowering.base import MaskSpec
from support.helpers import fake_target
from support.oracles import dspark_heads as dspark
from support.oracles import draft_oracle as ref_draft  # noqa: F401  (re-exported for the tests)

HID, HQ, HKV, D, ROT, INTER, VOCAB, BLOCK, W, RANK = 64, 4, 2, 16, 8, 96, 97, 4, 6, 8
TGT_H, TGT_LAYERS, MASK_ID, EPS, THETA = 32, [1, 3, 5], 96, 1e-6, 10000.0

# (causal, window) per layer: windowed non-causal, full non-causal, windowed causal
LAYERS = [(False, W), (False, None), (True, W)]
TABLE = {"cpu": "dense", "sm90": "triton_window_block", "sm100": "trtllm_gen"}


def make_config(gemma=True, act="swigluoai", sfa=True, rank=RANK, conf=True, conf_markov=True, layers=LAYERS,
                block=BLOCK, tables=None):
    """A flattened draftsmith config.json (docs/converted-format.md) at tiny dims; ``tables``:
    the lowering table of each layer (default :data:`TABLE` for all)."""
    tables = tables or [TABLE] * len(layers)
    style = "gemma" if gemma else "plain"
    norms = {k: style for k in ("input_layernorm", "post_attention_layernorm", "q_norm", "norm")}
    norms.update(k_norm="plain", hidden_norm="plain")  # as TensorRT-LLM computes them: folded
    dspark = {"markov_rank": rank, "markov_head_type": "vanilla", "enable_confidence_head": conf,
              "confidence_head_with_markov": conf_markov, "sample_from_anchor": sfa}
    return {
        "architectures": ["DSparkDraftModel"], "hidden_size": HID, "num_hidden_layers": len(layers),
        "num_attention_heads": HQ, "num_key_value_heads": HKV, "head_dim": D, "rotary_dim": ROT,
        "rope_theta": THETA, "rms_norm_eps": EPS, "vocab_size": VOCAB, "intermediate_size": INTER,
        "hidden_act": act, "swiglu_alpha": 1.702, "swiglu_limit": 7.0, "target_hidden_size": TGT_H,
        "torch_dtype": "float32",
        "layer_types": ["sliding_attention" if w else "full_attention" for _, w in layers], "sliding_window": W,
        "dflash_config": {"block_size": block, "mask_token_id": MASK_ID, "target_layer_ids": TGT_LAYERS,
                          "use_swa": True, "swa_window_size": W},
        "dspark_config": dspark,
        "draftsmith": ResolvedDrafter(
            adapter="test", spec_sha256="0" * 64, family="gqa_dflash",
            dims=Dims(hidden=HID, heads=HQ, kv_heads=HKV, head_dim=D, rotary_dim=ROT, intermediate=INTER,
                      vocab=VOCAB, num_layers=len(layers), target_hidden=TGT_H, num_target_layers=len(TGT_LAYERS),
                      dtype="float32"),
            rope=Rope(theta=THETA, type="default"), rms_norm_eps=EPS,
            mlp=Mlp(kind="swiglu_oai", alpha=1.702, limit=7.0) if act == "swigluoai" else Mlp(kind="swiglu"),
            block_size=block, mask_token_id=MASK_ID, target_layer_ids=TGT_LAYERS, sample_from_anchor=sfa,
            norms=norms, heads=Heads(markov_rank=rank, confidence=conf, confidence_with_markov=conf and conf_markov),
            layers=[LayerPlan(mask=MaskSpec(c, w), lowering=t) for (c, w), t in zip(layers, tables)],
            sources={"all": "test_host.make_config"},
        ).section(),
    }


def make_weights(config: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights in the target layout; norm weights near 0 (gemma) or near 1 (plain)."""
    g = torch.Generator().manual_seed(seed)
    ds = dspark(config)
    norms = ResolvedDrafter.from_config(config).norms

    def lin(o, i):
        return torch.randn(o, i, generator=g) / math.sqrt(i)

    def nrm(kind, n):
        base = 0.0 if norms[kind] == "gemma" else 1.0
        return base + 0.2 * torch.randn(n, generator=g)

    w = {"fc.weight": lin(HID, len(TGT_LAYERS) * TGT_H), "hidden_norm.weight": nrm("hidden_norm", HID),
         "norm.weight": nrm("norm", HID)}
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        w[p + "input_layernorm.weight"] = nrm("input_layernorm", HID)
        w[p + "post_attention_layernorm.weight"] = nrm("post_attention_layernorm", HID)
        w[p + "self_attn.q_proj.weight"] = lin(HQ * D, HID)
        w[p + "self_attn.k_proj.weight"] = lin(HKV * D, HID)
        w[p + "self_attn.v_proj.weight"] = lin(HKV * D, HID)
        w[p + "self_attn.o_proj.weight"] = lin(HID, HQ * D)
        w[p + "self_attn.q_norm.weight"] = nrm("q_norm", D)
        w[p + "self_attn.k_norm.weight"] = nrm("k_norm", D)
        w[p + "mlp.gate_proj.weight"] = 3 * lin(INTER, HID)  # large enough to hit the swiglu_oai clamps
        w[p + "mlp.up_proj.weight"] = 3 * lin(INTER, HID)
        w[p + "mlp.down_proj.weight"] = lin(HID, INTER)
    r = ds["markov_rank"]
    if r:
        w["markov_head.markov_w1.weight"] = torch.randn(VOCAB, r, generator=g)
        w["markov_head.markov_w2.weight"] = torch.randn(VOCAB, r, generator=g) / math.sqrt(r)
    if ds["enable_confidence_head"]:
        w["confidence_head.proj.weight"] = lin(1, HID + (r if ds["confidence_head_with_markov"] else 0))
        w["confidence_head.proj.bias"] = torch.randn(1, generator=g)
    return w


def make_target(seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"model.embed_tokens.weight": torch.randn(VOCAB, HID, generator=g),
            "lm_head.weight": torch.randn(VOCAB, HID, generator=g) / math.sqrt(HID)}


def write_checkpoint(root: Path, config: dict, weights: dict, target: dict, shards: int = 1) -> tuple[Path, Path]:
    """Write ``root/draft`` (config.json + safetensors, sharded with an index if ``shards > 1``)
    and ``root/target`` (config.json + model.safetensors); returns both directories."""
    ck, tg = root / "draft", root / "target"
    ck.mkdir(parents=True)
    tg.mkdir(parents=True)
    (ck / "config.json").write_text(json.dumps(config))
    names = sorted(weights)
    if shards == 1:
        save_file({k: weights[k].contiguous() for k in names}, str(ck / "model.safetensors"))
    else:
        wmap = {}
        for s in range(shards):
            fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = names[s::shards]
            save_file({k: weights[k].contiguous() for k in part}, str(ck / fn))
            wmap.update({k: fn for k in part})
        (ck / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    (tg / "config.json").write_text(json.dumps({"hidden_size": HID, "vocab_size": VOCAB}))
    save_file(target, str(tg / "model.safetensors"))
    return ck, tg


# ---- the independent float64 reference of section 1 -------------------------------------------


# ---- helpers ------------------------------------------------------------------------------------


def build(config, weights, target, lowering=None):
    model = DFlashDraftModel(ResolvedDrafter.from_config(config), device="cpu", dtype=torch.float32, lowering=lowering)
    model.load_weights(weights)

    model.load_weights_from_target_model(fake_target(target["model.embed_tokens.weight"], target["lm_head.weight"]))
    return model


def assert_matches(out_logits, out_toks, out_conf, ref):
    toks, logits, conf = ref
    rel = (out_logits.double() - logits).abs().max() / logits.abs().max()
    assert rel < 1e-4, f"logits off by {rel:.2e} relative"
    assert out_toks.tolist() == toks.tolist()
    if conf is None:
        assert out_conf is None
    else:
        torch.testing.assert_close(out_conf.double(), conf, rtol=1e-4, atol=1e-5)


def rand_hidden(c, seed):
    return torch.randn(c, len(TGT_LAYERS) * TGT_H, generator=torch.Generator().manual_seed(seed)) * 2.0
