"""Drafter families (closed registry): the target layout a family's engines load.

A family knows, from a flattened config alone, every tensor of its target layout (name,
shape, dtype), which norms it has, how to fill config defaults, and ``max_draft_len``.
One family per architecture shape, shared by every adapter of that shape.
"""

from __future__ import annotations

from typing import Any

import torch

from ...transforms.base import TensorMeta, dtype_from_name

from ...registry import Registry
from ..errors import UserError
from .dotted import get_dotted


class GQADFlash:
    """GQA DFlash / DSpark drafters (section 1 of the drafter reference)."""

    name = "gqa_dflash"
    description = "GQA DFlash/DSpark block drafter (fc + hidden_norm context, non-causal block attention)"
    #: norm kind -> the tensor name template of layer 0 (or the only one)
    norm_kinds = {
        "input_layernorm": "layers.{i}.input_layernorm.weight",
        "post_attention_layernorm": "layers.{i}.post_attention_layernorm.weight",
        "q_norm": "layers.{i}.self_attn.q_norm.weight",
        "k_norm": "layers.{i}.self_attn.k_norm.weight",
        "hidden_norm": "hidden_norm.weight",
        "norm": "norm.weight",
    }
    #: config keys the family derives from others when the config lacks them
    derived = {"head_dim": "hidden_size / num_attention_heads", "rotary_dim": "head_dim",
               "target_hidden_size": "hidden_size"}
    required = (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "intermediate_size", "vocab_size", "dflash_config.block_size",
        "dflash_config.mask_token_id", "dflash_config.target_layer_ids",
    )

    def complete(self, cfg: dict[str, Any]) -> None:
        """Fill family defaults in place and check what the family needs."""
        missing = [k for k in self.required if get_dotted(cfg, k) is None]
        if missing:
            raise UserError(f"config: missing {', '.join(missing)} (needed by family {self.name})")
        cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        if cfg.get("rotary_dim") is None:
            cfg["rotary_dim"] = cfg["head_dim"]
        if cfg.get("target_hidden_size") is None:
            cfg["target_hidden_size"] = cfg["hidden_size"]
        cfg.setdefault("rope_theta", 10000.0)
        cfg.setdefault("rms_norm_eps", 1e-6)
        cfg.setdefault("hidden_act", "silu")
        if cfg["hidden_act"] not in ("silu", "swigluoai"):
            raise UserError(f"config: hidden_act {cfg['hidden_act']!r} is not supported (silu, swigluoai)")
        if cfg["hidden_act"] == "swigluoai":
            cfg.setdefault("swiglu_alpha", 1.702)
            cfg.setdefault("swiglu_limit", 7.0)
        ds = cfg.setdefault("dspark_config", {})
        ds.setdefault("markov_rank", 0)
        ds.setdefault("markov_head_type", "vanilla")
        ds.setdefault("enable_confidence_head", False)
        ds.setdefault("confidence_head_with_markov", False)
        ds.setdefault("sample_from_anchor", False)
        h, hq, hkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        if hq % hkv:
            raise UserError(f"config: num_attention_heads {hq} is not a multiple of num_key_value_heads {hkv}")
        if not 0 < cfg["rotary_dim"] <= d or cfg["rotary_dim"] % 2:
            raise UserError(f"config: rotary_dim {cfg['rotary_dim']} must be even and in 1..head_dim ({d})")

    def mirror(self, cfg: dict[str, Any]) -> None:
        """Copies TensorRT-LLM's DFlash loader reads at the top level (``block_size``)."""
        cfg["block_size"] = cfg["dflash_config"]["block_size"]

    def target_layout(self, cfg: dict[str, Any]) -> dict[str, TensorMeta]:
        """Every tensor the converted checkpoint holds, in a fixed order."""
        dt = dtype_from_name(cfg.get("torch_dtype", "bfloat16"))
        h, hq, hkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        ff, v = cfg["intermediate_size"], cfg["vocab_size"]
        n_in = len(cfg["dflash_config"]["target_layer_ids"]) * cfg["target_hidden_size"]
        m = lambda *shape: TensorMeta(tuple(shape), dt)  # noqa: E731
        out = {"fc.weight": m(h, n_in), "hidden_norm.weight": m(h)}
        for i in range(cfg["num_hidden_layers"]):
            p = f"layers.{i}."
            out[p + "input_layernorm.weight"] = m(h)
            out[p + "self_attn.q_proj.weight"] = m(hq * d, h)
            out[p + "self_attn.k_proj.weight"] = m(hkv * d, h)
            out[p + "self_attn.v_proj.weight"] = m(hkv * d, h)
            out[p + "self_attn.o_proj.weight"] = m(h, hq * d)
            out[p + "self_attn.q_norm.weight"] = m(d)
            out[p + "self_attn.k_norm.weight"] = m(d)
            out[p + "post_attention_layernorm.weight"] = m(h)
            out[p + "mlp.gate_proj.weight"] = m(ff, h)
            out[p + "mlp.up_proj.weight"] = m(ff, h)
            out[p + "mlp.down_proj.weight"] = m(h, ff)
        out["norm.weight"] = m(h)
        ds = cfg["dspark_config"]
        r = ds["markov_rank"]
        if r:
            out["markov_head.markov_w1.weight"] = m(v, r)
            out["markov_head.markov_w2.weight"] = m(v, r)
        if ds["enable_confidence_head"]:
            extra = r if ds["confidence_head_with_markov"] else 0
            out["confidence_head.proj.weight"] = m(1, h + extra)
            out["confidence_head.proj.bias"] = m(1)
        return out

    def sample(self, name: str, meta: TensorMeta, gen: torch.Generator) -> torch.Tensor:
        """Plausible random values for a target tensor no transform samples."""
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            x = 1.0 + 0.1 * torch.randn(meta.shape, generator=gen)
        elif name.endswith(".bias"):
            x = 0.1 * torch.randn(meta.shape, generator=gen)
        else:
            x = torch.randn(meta.shape, generator=gen) * 0.02
        return x.to(meta.dtype)

    def borrowed_layout(self, cfg: dict[str, Any]) -> dict[str, TensorMeta]:
        """The target's tensors the drafter borrows (written by ``synth`` under ``target/``)."""
        dt = dtype_from_name(cfg.get("torch_dtype", "bfloat16"))
        v, ht = cfg["vocab_size"], cfg["hidden_size"]
        return {"model.embed_tokens.weight": TensorMeta((v, ht), dt), "lm_head.weight": TensorMeta((v, ht), dt)}


FAMILIES: Registry[GQADFlash] = Registry("family")
FAMILIES.register(GQADFlash.name, GQADFlash())


def get_family(name: str) -> GQADFlash:
    """The family named ``name``; an unknown name lists the known ones."""
    return FAMILIES.lookup(name)
