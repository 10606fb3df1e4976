"""Read the flattened drafter ``config.json`` (docs/converted-format.md) into one typed record."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from draftsmith.lowering.base import MaskSpec

from .layers import LayerShape
from .modules import mlp_kind

NORM_NAMES = ("input_layernorm", "post_attention_layernorm", "q_norm", "k_norm", "hidden_norm", "norm")

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def torch_dtype(name: str | torch.dtype) -> torch.dtype:
    """``"bfloat16"`` -> ``torch.bfloat16`` (also accepts a ``torch.dtype``)."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[str(name).removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"unsupported torch_dtype {name!r}; known: {', '.join(DTYPES)}") from None


def _req(cfg: dict, key: str):
    if key not in cfg:
        raise KeyError(f"drafter config lacks {key!r} (is this a draftsmith-converted config.json?)")
    return cfg[key]


@dataclass(frozen=True)
class DraftConfig:
    """What the host needs from the flattened config.

    Drafted slots (``sample_from_anchor``): with it, slot ``j`` of the block predicts the token
    at position ``C+j+1`` and all ``B`` slots draft (``K == B``); without it slot 0 holds only
    the anchor, slot ``j >= 1`` predicts position ``C+j`` and ``K == B-1``. In both, the Markov
    ``prev`` of a drafted slot is the token one position before the one it predicts.
    """

    layer: LayerShape
    num_layers: int
    vocab_size: int
    target_hidden_size: int
    num_target_layers: int
    dtype: torch.dtype
    block_size: int
    mask_token_id: int
    norms: dict
    masks: tuple[MaskSpec, ...]
    lowering_tables: tuple[dict, ...]
    markov_rank: int
    confidence: bool
    confidence_with_markov: bool
    sample_from_anchor: bool

    @property
    def max_draft_len(self) -> int:
        """``K``: tokens drafted per step."""
        return self.block_size if self.sample_from_anchor else self.block_size - 1

    @property
    def first_slot(self) -> int:
        """Block slot whose logits draft token 0 (slots ``first_slot .. B-1`` draft, in order)."""
        return 0 if self.sample_from_anchor else 1

    @classmethod
    def from_dict(cls, cfg: dict) -> "DraftConfig":
        hidden = int(_req(cfg, "hidden_size"))
        heads = int(_req(cfg, "num_attention_heads"))
        act = _req(cfg, "hidden_act")
        swiglu_oai = mlp_kind(act) == "swiglu_oai"
        shape = LayerShape(
            hidden=hidden,
            heads=heads,
            kv_heads=int(_req(cfg, "num_key_value_heads")),
            head_dim=int(_req(cfg, "head_dim")),
            rotary_dim=int(_req(cfg, "rotary_dim")),
            rope_theta=float(_req(cfg, "rope_theta")),
            eps=float(_req(cfg, "rms_norm_eps")),
            inter=int(_req(cfg, "intermediate_size")),
            mlp=mlp_kind(act),
            # only swiglu_oai reads these; flattening refuses swigluoai without them
            alpha=float(_req(cfg, "swiglu_alpha")) if swiglu_oai else 0.0,
            limit=float(_req(cfg, "swiglu_limit")) if swiglu_oai else 0.0,
        )
        ds = _req(cfg, "draftsmith")
        dfl = _req(cfg, "dflash_config")
        dsp = cfg.get("dspark_config") or {}
        norms = dict(_req(ds, "norms"))
        for k in NORM_NAMES:
            if norms.get(k) not in ("gemma", "plain"):
                raise ValueError(f"draftsmith.norms.{k} must be 'gemma' or 'plain', got {norms.get(k)!r}")
        num_layers = int(_req(cfg, "num_hidden_layers"))
        layers = list(_req(ds, "layers"))
        if len(layers) != num_layers:
            raise ValueError(f"draftsmith.layers has {len(layers)} entries for {num_layers} layers")
        masks = tuple(MaskSpec(causal=bool(l["causal"]), window=l.get("window")) for l in layers)
        block = int(_req(dfl, "block_size"))
        sfa = dsp.get("sample_from_anchor")
        if sfa is None:
            mdl = ds.get("max_draft_len")
            sfa = (int(mdl) == block) if mdl is not None else bool(dsp)
        rank = int(dsp.get("markov_rank") or 0)
        if rank and dsp.get("markov_head_type", "vanilla") != "vanilla":
            raise ValueError(f"markov_head_type {dsp.get('markov_head_type')!r} unsupported; known: vanilla")
        conf = bool(dsp.get("enable_confidence_head", False))
        conf_markov = conf and bool(dsp.get("confidence_head_with_markov", False))
        if conf_markov and not rank:
            raise ValueError("confidence_head_with_markov needs a Markov head (markov_rank > 0)")
        out = cls(
            layer=shape,
            num_layers=num_layers,
            vocab_size=int(_req(cfg, "vocab_size")),
            target_hidden_size=int(cfg.get("target_hidden_size") or hidden),
            num_target_layers=len(_req(dfl, "target_layer_ids")),
            dtype=torch_dtype(cfg.get("torch_dtype", "bfloat16")),
            block_size=block,
            mask_token_id=int(_req(dfl, "mask_token_id")),
            norms=norms,
            masks=masks,
            lowering_tables=tuple(dict(l.get("lowering") or {}) for l in layers),
            markov_rank=rank,
            confidence=conf,
            confidence_with_markov=conf_markov,
            sample_from_anchor=bool(sfa),
        )
        mdl = ds.get("max_draft_len")
        if mdl is not None and int(mdl) != out.max_draft_len:
            raise ValueError(
                f"draftsmith.max_draft_len={mdl} contradicts block_size={block} with "
                f"sample_from_anchor={out.sample_from_anchor}"
            )
        return out
