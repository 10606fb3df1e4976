"""Stand-in for z-lab's DFlash draft model (conformance tests only; no z-lab code copied).

z-lab's reader is not pip-installable (``dflash`` is not on PyPI); this module plays it from
its public source, read for facts and written anew here:

- repo ``z-lab/dflash``, path ``dflash/model.py``, commit
  ``44947fbf71114e241c96de194f4b382b5dd330d0`` (main, 2026-04-26): ``build_target_layer_ids``,
  ``extract_context_feature``, ``apply_rotary_pos_emb``, ``Qwen3DFlashAttention``,
  ``Qwen3DFlashDecoderLayer``, ``DFlashDraftModel.__init__`` / ``forward``, and the draft call
  of ``dflash_generate`` (the first block after the prompt);
- same commit, ``dflash/benchmark.py``: ``_get_transformers_attn_impl`` (flash_attention_2 when
  ``flash_attn`` imports, else sdpa) and ``_run_transformers`` (the load path:
  ``DFlashDraftModel.from_pretrained(path, attn_implementation=..., dtype=...)``);
- same commit, ``dflash/model_mlx.py``: ``load_draft`` (the config keys the MLX loader indexes).

Like z-lab's class, :class:`DFlashDraftModel` is a ``Qwen3PreTrainedModel`` with
``config_class = Qwen3Config`` built from transformers' own ``Qwen3RMSNorm``, ``Qwen3MLP``,
``Qwen3RotaryEmbedding`` and ``rotate_half`` (the installed transformers: the crosscheck pins
5.19.0; z-lab pins 4.57.1 for its transformers backend, and the suite passes on both -- see
PROVENANCE.md), so its config reading, weight
loading (``from_pretrained``) and saving (``save_pretrained``) are transformers' own.

Attention. z-lab's attention is non-causal (``is_causal = False``; ``dflash_generate`` passes
``is_causal=False``), with ``attention_mask=None``, and hands ``sliding_window`` (the config's
``sliding_window`` on layers whose ``layer_types`` entry is ``sliding_attention``) to the
transformers attention function. transformers 5.19.0's ``eager_attention_forward`` and
``sdpa_attention_forward`` never read it (every layer sees every key); its
``_flash_attention_forward`` (``modeling_flash_attention_utils.py``) passes
``window_size=(W - 1, W - 1)`` to flash-attn when the key length exceeds ``W``, and flash-attn
(``flash_attn_func`` docstring) lets query ``i`` see keys
``[i + Lk - Lq - left, i + Lk - Lq + right]``. :func:`attend` plays both: ``impl`` is
``"flash_attention_2"`` (z-lab's choice on a machine with flash-attn) or ``"sdpa"``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (Qwen3MLP, Qwen3PreTrainedModel, Qwen3RMSNorm,
                                                      Qwen3RotaryEmbedding, rotate_half)

ZLAB_REPO = "z-lab/dflash"
ZLAB_COMMIT = "44947fbf71114e241c96de194f4b382b5dd330d0"
IMPLS = ("flash_attention_2", "sdpa")


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """``model.py:build_target_layer_ids``: the default ids when ``dflash_config`` has none
    (one draft layer: the middle target layer; else evenly from 1 to ``num_target_layers - 3``)."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    lo, hi = 1, num_target_layers - 3
    return [int(round(lo + i * (hi - lo) / (num_draft_layers - 1))) for i in range(num_draft_layers)]


def extract_context_feature(hidden_states: list[torch.Tensor], layer_ids: list[int]) -> torch.Tensor:
    """``model.py:extract_context_feature``: ``hidden_states[id + 1]`` (index 0 is the embedding
    output) for each id, concatenated on the last dim: ids name target layer *outputs*."""
    return torch.cat([hidden_states[i + 1] for i in layer_ids], dim=-1)


def rotate(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """``model.py:apply_rotary_pos_emb``: cos/sin span context + block positions; keys take
    them all, queries (the block) only the last ``q_len``. ``q, k [b, heads, len, d]``."""
    cos, sin = cos[:, None], sin[:, None]
    n = q.shape[-2]
    return (q * cos[..., -n:, :] + rotate_half(q) * sin[..., -n:, :],
            k * cos + rotate_half(k) * sin)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float, window: int | None, impl: str):
    """Non-causal attention with no mask, as transformers runs z-lab's call (module docstring).
    ``q [b, hq, Lq, d]``, ``k, v [b, hkv, Lk, d]``; returns ``[b, Lq, hq, d]``."""
    if impl not in IMPLS:
        raise ValueError(f"impl {impl!r}: one of {IMPLS}")
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(2, 3)) * scaling
    lq, lk = q.shape[2], k.shape[2]
    if impl == "flash_attention_2" and window is not None and lk > window:
        qi = torch.arange(lq)[:, None] + (lk - lq)  # bottom-right aligned: query i sits at key i + Lk - Lq
        kj = torch.arange(lk)[None, :]
        scores = scores.masked_fill((kj - qi).abs() > window - 1, float("-inf"))
    p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return (p @ v).transpose(1, 2)


class DFlashAttention(nn.Module):
    """``model.py:Qwen3DFlashAttention``: queries from the block; keys/values from the
    projected context rows followed by the block rows (the same ``k_proj`` / ``v_proj``);
    per-head RMS ``q_norm`` / ``k_norm`` before RoPE."""

    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        self.head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
        self.scaling = self.head_dim ** -0.5
        self.is_causal = False
        hq, hkv, h, bias = config.num_attention_heads, config.num_key_value_heads, config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(h, hq * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(h, hkv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(h, hkv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(hq * self.head_dim, h, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.sliding_window = config.sliding_window if config.layer_types[layer_idx] == "sliding_attention" else None

    def forward(self, x: torch.Tensor, ctx: torch.Tensor, cos_sin, impl: str) -> torch.Tensor:
        b, n, _ = x.shape
        c, d = ctx.shape[1], self.head_dim
        q = self.q_norm(self.q_proj(x).view(b, n, -1, d)).transpose(1, 2)
        k = torch.cat([self.k_proj(ctx), self.k_proj(x)], dim=1).view(b, c + n, -1, d)
        v = torch.cat([self.v_proj(ctx), self.v_proj(x)], dim=1).view(b, c + n, -1, d)
        k, v = self.k_norm(k).transpose(1, 2), v.transpose(1, 2)
        q, k = rotate(q, k, *cos_sin)
        out = attend(q, k, v, self.scaling, self.sliding_window, impl)
        return self.o_proj(out.reshape(b, n, -1))


class DFlashDecoderLayer(nn.Module):
    """``model.py:Qwen3DFlashDecoderLayer``: pre-norm residual attention, then pre-norm
    residual ``Qwen3MLP``; the context rows enter every layer unchanged."""

    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        self.self_attn = DFlashAttention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, x, ctx, cos_sin, impl):
        x = x + self.self_attn(self.input_layernorm(x), ctx, cos_sin, impl)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraftModel(Qwen3PreTrainedModel):
    """``model.py:DFlashDraftModel`` (same class and module names, so ``save_pretrained``
    writes ``architectures: [DFlashDraftModel]`` and the same tensor names).

    ``__init__`` reads ``dflash_config.get("target_layer_ids", build_target_layer_ids(
    config.num_target_layers, ...))`` -- the default is evaluated first, so
    ``num_target_layers`` must exist even when the ids are given --, ``config.block_size``
    and ``dflash_config.get("mask_token_id")``."""

    config_class = Qwen3Config
    _no_split_modules = ["DFlashDecoderLayer"]

    def __init__(self, config: Qwen3Config):
        super().__init__(config)
        self.layers = nn.ModuleList([DFlashDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        default_ids = build_target_layer_ids(config.num_target_layers, config.num_hidden_layers)
        self.target_layer_ids = config.dflash_config.get("target_layer_ids", default_ids)
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.fc = nn.Linear(len(self.target_layer_ids) * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.block_size = config.block_size
        self.mask_token_id = config.dflash_config.get("mask_token_id", None)
        self.attention_impl = "flash_attention_2"  # see the module docstring
        self.post_init()

    def forward(self, position_ids: torch.Tensor, noise_embedding: torch.Tensor, target_hidden: torch.Tensor):
        """``model.py:DFlashDraftModel.forward`` without a cache: ``target_hidden [b, C, n*h]``
        (context features), ``noise_embedding [b, B, h]``, ``position_ids [b, C + B]``;
        returns the final-normed block states ``[b, B, h]``."""
        ctx = self.hidden_norm(self.fc(target_hidden))
        cos_sin = self.rotary_emb(noise_embedding, position_ids)
        x = noise_embedding
        for layer in self.layers:
            x = layer(x, ctx, cos_sin, self.attention_impl)
        return self.norm(x)


def draft_block(model: DFlashDraftModel, embed: torch.Tensor, lm_head: torch.Tensor, target_hidden: torch.Tensor,
                anchor: int):
    """The first draft call of ``dflash_generate`` after a prompt of ``C`` tokens, greedy:
    block ids ``[anchor, mask, ..., mask]`` (``block_size`` of them, at positions
    ``C..C+B-1``) embedded with the target's ``embed_tokens``; ``position_ids`` ``0..C+B-1``
    (the empty draft cache up to the block's end); the target's ``lm_head`` on the last
    ``B - 1`` rows; argmax. ``target_hidden [C, n*h]``. Returns ``(tokens [B-1], logits [B-1, V])``."""
    b, c = model.block_size, target_hidden.shape[0]
    ids = torch.full((1, b), model.mask_token_id, dtype=torch.long)
    ids[0, 0] = anchor
    with torch.no_grad():
        out = model(position_ids=torch.arange(c + b)[None], noise_embedding=embed[ids],
                    target_hidden=target_hidden[None].to(embed.dtype))
        logits = out[:, 1 - b:, :] @ lm_head.T
    return logits[0].argmax(-1), logits[0]


# ---- config keys the readers index ---------------------------------------------------------------

#: ``load_draft`` (model_mlx.py) indexes these (``KeyError`` when absent); ``rope_scaling`` is optional
MLX_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings", "block_size",
            "num_target_layers", "dflash_config.target_layer_ids", "dflash_config.mask_token_id")
#: keys the transformers path reads whose absence would silently take a ``Qwen3Config`` default
#: that changes the math (``head_dim`` 128, ``rope_theta`` 10000, ``rms_norm_eps`` 1e-6, ...)
MATH_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
             "intermediate_size", "hidden_act", "rms_norm_eps", "rope_theta", "attention_bias", "block_size",
             "num_target_layers", "dflash_config.target_layer_ids", "dflash_config.mask_token_id")


def config_problems(raw: dict, keys=MATH_KEYS) -> list[str]:
    """Keys of ``keys`` missing from ``raw`` (or of the wrong type). ``rope_theta`` counts as
    present when ``rope_parameters.rope_theta`` holds it, except for the MLX loader."""
    out = []
    for key in keys:
        node = raw
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None and key == "rope_theta" and keys is not MLX_KEYS:
            node = (raw.get("rope_parameters") or {}).get("rope_theta")
        ints = {"block_size", "num_target_layers", "dflash_config.mask_token_id", "hidden_size", "head_dim"}
        if node is None:
            out.append(f"{key}: missing")
        elif key in ints and not (isinstance(node, int) and not isinstance(node, bool)):
            out.append(f"{key}: {node!r} is not an int")
        elif key == "dflash_config.target_layer_ids" and not (isinstance(node, list) and all(isinstance(i, int) for i in node)):
            out.append(f"{key}: {node!r} is not a list of ints")
    return out


class LoadRefused(Exception):
    """The stand-in loader would not run this checkpoint as the model it describes."""


def load(path: str | Path, impl: str = "flash_attention_2", dtype=torch.float32) -> DFlashDraftModel:
    """``benchmark.py:_run_transformers``'s load: ``DFlashDraftModel.from_pretrained(path,
    dtype=...)`` (transformers' own loader). transformers only warns about missing,
    unexpected or mis-shaped tensors (and initializes the missing ones at random); here any
    of them, or a key of :data:`MATH_KEYS` missing, raises :class:`LoadRefused`."""
    raw = json.loads((Path(path) / "config.json").read_text())
    problems = config_problems(raw)
    if problems:
        raise LoadRefused("; ".join(problems))
    try:
        model, info = DFlashDraftModel.from_pretrained(str(path), dtype=dtype, attn_implementation="eager",
                                                       output_loading_info=True)
    except Exception as e:  # transformers refuses a tensor whose shape disagrees with the config
        raise LoadRefused(f"from_pretrained: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")}
    if bad:
        raise LoadRefused(f"from_pretrained: {bad}")
    model.attention_impl = impl
    return model.eval()
