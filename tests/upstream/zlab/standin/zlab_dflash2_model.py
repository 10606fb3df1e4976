"""Stand-in for z-lab's DFlash 2 draft model (conformance tests only; no z-lab code copied).

z-lab's reader is not pip-installable (``dflash`` is not on PyPI); this module plays it from its
public source, read for facts and written anew here:

- repo ``z-lab/dflash``, path ``dflash/model.py``, commit
  ``10129599dffb338ff38cfd235a53ca6d3667b4dd``: ``_draft_value``, ``_raw_input_embeddings``,
  ``_attention_mask``, ``apply_rotary_pos_emb``, ``Qwen3DFlashAttention``,
  ``Qwen3DFlashDecoderLayer.forward`` (``attention_conv`` / ``mlp_conv`` ``prepare`` before and
  ``finish`` after each sublayer), ``_grouped_dynamic_convolve``, ``GroupedDynamicCausalConv``,
  ``CandidateSelector.select``, ``DFlashDraftModel.__init__`` / ``forward`` /
  ``compute_logits``, ``DFlash2DraftModel.from_pretrained`` (its ``key_mapping`` of the bare
  codebook names onto ``nn.Embedding`` ``.weight``) / ``__init__`` / ``propose``, and the first
  draft call of ``dflash_generate`` (empty draft cache).

Like z-lab's classes it is a ``Qwen3PreTrainedModel`` (``config_class = Qwen3Config``) on the
installed transformers' own ``Qwen3RMSNorm``, ``Qwen3MLP``, ``Qwen3RotaryEmbedding``,
``rotate_half`` and ``ALL_ATTENTION_FUNCTIONS["sdpa"]`` (z-lab always calls the sdpa entry, with
its own boolean mask), so config reading and ``from_pretrained`` are transformers' own. Left out:
the draft KV cache (``past_key_values``; one block after the prompt needs none), training-time
dropout, gradient checkpointing. Nothing is added that z-lab's classes lack.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.qwen3.modeling_qwen3 import (ALL_ATTENTION_FUNCTIONS, Qwen3Config, Qwen3MLP,
                                                      Qwen3PreTrainedModel, Qwen3RMSNorm, Qwen3RotaryEmbedding,
                                                      rotate_half)

ZLAB_REPO = "z-lab/dflash"
ZLAB_COMMIT = "10129599dffb338ff38cfd235a53ca6d3667b4dd"


def _draft_value(config, name, default=None):
    """``model.py:_draft_value``: ``dflash_config[name]``, else the top-level ``name``, else ``default``."""
    return getattr(config, "dflash_config", {}).get(name, getattr(config, name, default))


def _attention_mask(q_len: int, k_len: int, *, is_causal: bool, sliding_window):
    """``model.py:_attention_mask``: query ``i`` sits at key position ``k_len - q_len + i``;
    causal keeps ``key <= query``; a window keeps ``query - key < W`` and, when not causal,
    ``key - query < W``. Boolean ``[1, 1, q_len, k_len]`` (True: visible)."""
    qp = k_len - q_len + torch.arange(q_len)[:, None]
    kp = torch.arange(k_len)[None, :]
    visible = torch.ones(q_len, k_len, dtype=torch.bool)
    if is_causal:
        visible &= kp <= qp
    if sliding_window is not None:
        visible &= qp - kp < sliding_window
        if not is_causal:
            visible &= kp - qp < sliding_window
    return visible[None, None]


def apply_rotary_pos_emb(q, k, cos, sin):
    """``model.py:apply_rotary_pos_emb``: keys take every position, queries the last ``q_len``."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    n = q.size(-2)
    return (q * cos[..., -n:, :] + rotate_half(q) * sin[..., -n:, :],
            k * cos + rotate_half(k) * sin)


class Qwen3DFlashAttention(nn.Module):
    """``model.py:Qwen3DFlashAttention``: keys/values are the context rows then the block rows
    through the same projections; ``is_causal`` is the config's ``is_causal`` when given, else
    ``layer_type == "sliding_attention"``; ``sliding_window`` only on sliding layers."""

    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = config.attention_dropout
        h, bias = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(h, config.num_attention_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(h, config.num_key_value_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(h, config.num_key_value_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, h, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        layer_types = getattr(config, "layer_types", None)
        layer_type = layer_types[layer_idx] if layer_types else "full_attention"
        is_causal = getattr(config, "is_causal", None)
        self.is_causal = layer_type == "sliding_attention" if is_causal is None else bool(is_causal)
        self.sliding_window = config.sliding_window if layer_type == "sliding_attention" else None

    def forward(self, hidden_states, target_hidden, position_embeddings):
        bsz, q_len = hidden_states.shape[:-1]
        ctx_len = target_hidden.shape[1]
        q = self.q_norm(self.q_proj(hidden_states).view(bsz, q_len, -1, self.head_dim)).transpose(1, 2)
        k = torch.cat([self.k_proj(target_hidden), self.k_proj(hidden_states)], dim=1)
        v = torch.cat([self.v_proj(target_hidden), self.v_proj(hidden_states)], dim=1)
        k = self.k_norm(k.view(bsz, ctx_len + q_len, -1, self.head_dim)).transpose(1, 2)
        v = v.view(bsz, ctx_len + q_len, -1, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        mask = None
        if self.is_causal or self.sliding_window is not None:
            mask = _attention_mask(q.shape[-2], k.shape[-2], is_causal=self.is_causal,
                                   sliding_window=self.sliding_window)
        out, _ = ALL_ATTENTION_FUNCTIONS["sdpa"](self, q, k, v, mask, dropout=0.0, scaling=self.scaling,
                                                 sliding_window=self.sliding_window)
        return self.o_proj(out.reshape(bsz, q_len, -1))


def _grouped_dynamic_convolve(hidden, dynamic, base, group_size):
    """``model.py:_grouped_dynamic_convolve``: ``out[t] = sum_o (base[o] + dynamic[t, o, g]) *
    hidden[t - o]`` (zero before the block's first row), channel ``c`` in group ``c // group_size``.
    ``hidden [b, L, h]``, ``dynamic [b, L, taps, groups]``, ``base [taps, h]``."""
    b, n, h = hidden.shape
    groups = h // group_size
    blocks = hidden.view(b, n, groups, group_size)
    dynamic = dynamic.view(b, n, base.shape[0], groups, 1)
    out = torch.zeros_like(blocks)
    for o in range(base.shape[0]):
        values = blocks if o == 0 else F.pad(blocks[:, :-o], (0, 0, 0, 0, o, 0))
        out = out + base[o].view(1, 1, groups, group_size).to(hidden.dtype) * values
        out = torch.addcmul(out, dynamic[:, :, o], values)
    return out.view_as(hidden)


class GroupedDynamicCausalConv(nn.Module):
    """``model.py:GroupedDynamicCausalConv``: ``base_kernel [2, taps, h]`` (0: before the
    sublayer, 1: after), ``kernel_projection [2 * taps * groups, h]`` read on the sublayer input."""

    def __init__(self, hidden_size, kernel_size, group_size):
        super().__init__()
        self.kernel_size, self.group_size = kernel_size, group_size
        self.base_kernel = nn.Parameter(torch.empty(2, kernel_size, hidden_size))
        self.kernel_projection = nn.Linear(hidden_size, 2 * kernel_size * (hidden_size // group_size), bias=False)

    def prepare(self, hidden):
        groups = hidden.shape[-1] // self.group_size
        dynamic = self.kernel_projection(hidden).view(*hidden.shape[:-1], 2, self.kernel_size, groups)
        return (_grouped_dynamic_convolve(hidden, dynamic[..., 0, :, :], self.base_kernel[0], self.group_size),
                dynamic[..., 1, :, :])

    def finish(self, hidden, dynamic):
        return _grouped_dynamic_convolve(hidden, dynamic, self.base_kernel[1], self.group_size)


class Qwen3DFlashDecoderLayer(nn.Module):
    """``model.py:Qwen3DFlashDecoderLayer`` (``attention_conv`` / ``mlp_conv`` are ``None`` in
    DFlash 1 and set by ``DFlash2DraftModel.__init__``)."""

    def __init__(self, config: Qwen3Config, layer_idx: int):
        super().__init__()
        self.self_attn = Qwen3DFlashAttention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.attention_conv = None
        self.mlp_conv = None

    def forward(self, target_hidden, hidden_states, position_embeddings):
        residual = hidden_states
        x = self.input_layernorm(hidden_states)
        kernel = None
        if self.attention_conv is not None:
            x, kernel = self.attention_conv.prepare(x)
        x = self.self_attn(x, target_hidden, position_embeddings)
        if kernel is not None:
            x = self.attention_conv.finish(x, kernel)
        hidden_states = residual + x
        residual = hidden_states
        x = self.post_attention_layernorm(hidden_states)
        kernel = None
        if self.mlp_conv is not None:
            x, kernel = self.mlp_conv.prepare(x)
        x = self.mlp(x)
        if kernel is not None:
            x = self.mlp_conv.finish(x, kernel)
        return residual + x


class CandidateSelector(nn.Module):
    """``model.py:CandidateSelector``: codebooks are ``nn.Embedding [V, rank]``."""

    def __init__(self, config):
        super().__init__()
        rank = int(_draft_value(config, "selector_rank"))
        self.top_k = int(_draft_value(config, "selector_top_k"))
        self.predecessor_codebook = nn.Embedding(config.vocab_size, rank)
        self.successor_codebook = nn.Embedding(config.vocab_size, rank)
        self.hidden_projection = nn.Linear(config.hidden_size, rank, bias=False)

    def select(self, hidden, logits, anchor_ids, temperature):
        """``CandidateSelector.select``: ``topk(logits, top_k, sorted=False)``; step ``j`` scores
        ``unary + (A[pred] * W_h z_j) . C[cand_j]`` with ``pred`` the previous step's pick (the
        anchor first); argmax at temperature 0, else a sample of ``softmax(scores / T)`` whose
        rows ``q`` are returned. Returns ``(path [b, K], candidates [b, K, k], q [b, K, k] or None)``."""
        unary, candidates = torch.topk(logits, self.top_k, dim=-1, sorted=False)
        hidden = self.hidden_projection(hidden)
        predecessor, path, q_rows = anchor_ids, [], []
        for j in range(hidden.shape[1]):
            scores = unary[:, j] + torch.einsum("br,bkr->bk", self.predecessor_codebook(predecessor) * hidden[:, j],
                                                self.successor_codebook(candidates[:, j]))
            if temperature > 0:  # model.py:_sampling_probs (no top-p/top-k) then _sample_probs
                q = torch.softmax(scores.float() / temperature, dim=-1)
                index = torch.multinomial(q, 1)[:, 0]
                q_rows.append(q)
            else:
                index = torch.argmax(scores, dim=-1)
            predecessor = candidates[:, j].gather(-1, index[:, None])[:, 0]
            path.append(predecessor)
        return torch.stack(path, dim=1), candidates, torch.stack(q_rows, dim=1) if q_rows else None


class DFlash2DraftModel(Qwen3PreTrainedModel):
    """``model.py:DFlash2DraftModel`` (its base ``DFlashDraftModel`` folded in: ``__init__``,
    ``forward``, ``compute_logits``; same module names, so the tensor names are z-lab's)."""

    config_class = Qwen3Config
    _no_split_modules = ["Qwen3DFlashDecoderLayer"]

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """z-lab's: the bare codebook names map onto ``nn.Embedding`` ``.weight`` (``key_mapping``)."""
        kwargs.setdefault("key_mapping", {f"candidate_selector.{n}": f"candidate_selector.{n}.weight"
                                          for n in ("predecessor_codebook", "successor_codebook")})
        return super().from_pretrained(*args, **kwargs)

    def __init__(self, config):
        super().__init__(config)
        self.layers = nn.ModuleList([Qwen3DFlashDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.target_layer_ids = _draft_value(config, "target_layer_ids")
        if self.target_layer_ids is None:
            raise ValueError("Draft config must define dflash_config.target_layer_ids.")
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.fc = nn.Linear(len(self.target_layer_ids) * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.block_size = int(_draft_value(config, "block_size", 16))
        self.mask_token_id = _draft_value(config, "mask_token_id")
        taps, group = int(_draft_value(config, "conv_kernel_size")), int(_draft_value(config, "conv_group_size"))
        for layer in self.layers:
            layer.attention_conv = GroupedDynamicCausalConv(config.hidden_size, taps, group)
            layer.mlp_conv = GroupedDynamicCausalConv(config.hidden_size, taps, group)
        self.candidate_selector = CandidateSelector(config)
        self.post_init()

    def forward(self, position_ids, noise_embedding, target_hidden):
        """``DFlashDraftModel.forward`` without a cache: final-normed block states ``[b, B, h]``."""
        ctx = self.hidden_norm(self.fc(target_hidden))
        pe = self.rotary_emb(noise_embedding, position_ids)
        x = noise_embedding
        for layer in self.layers:
            x = layer(target_hidden=ctx, hidden_states=x, position_embeddings=pe)
        return self.norm(x)

    def compute_logits(self, hidden, output_head):
        """``DFlashDraftModel.compute_logits``: ``head(z) * output_multiplier``, then
        ``cap * tanh(. / cap)`` when ``final_logit_softcapping`` is set and ``> 0``."""
        logits = output_head(hidden) * float(_draft_value(self.config, "output_multiplier", 1.0))
        cap = _draft_value(self.config, "final_logit_softcapping")
        if cap is not None and float(cap) > 0:
            logits = torch.tanh(logits / float(cap)) * float(cap)
        return logits

    def propose(self, hidden, anchor_ids, output_head, temperature):
        return self.candidate_selector.select(hidden, self.compute_logits(hidden, output_head), anchor_ids,
                                              temperature)


def draft_block(model: DFlash2DraftModel, embed: torch.Tensor, lm_head: torch.Tensor, target_hidden: torch.Tensor,
                anchor: int, temperature: float = 0.0) -> dict:
    """The first draft call of ``dflash_generate`` after a prompt of ``C`` tokens: block ids
    ``[anchor, mask x (B-1)]`` at positions ``C..C+B-1`` embedded by the target's
    ``embed_tokens`` times ``input_embedding_scale``; ``position_ids`` ``0..C+B-1``; the last
    ``B - 1`` rows go to ``propose`` with the target's ``lm_head``. ``target_hidden [C, n*h]``.
    Returns ``hidden [K, h]``, ``logits [K, V]`` (``compute_logits``), ``path [K]``,
    ``candidates [K, k]`` and ``q [K, k]`` (``None`` at temperature 0)."""
    b, c = model.block_size, target_hidden.shape[0]
    ids = torch.full((1, b), model.mask_token_id, dtype=torch.long)
    ids[0, 0] = anchor
    head = nn.Linear(lm_head.shape[1], lm_head.shape[0], bias=False)
    head.weight = nn.Parameter(lm_head.to(embed.dtype), requires_grad=False)
    scale = float(_draft_value(model.config, "input_embedding_scale", 1.0))
    with torch.no_grad():
        z = model(position_ids=torch.arange(c + b)[None], noise_embedding=F.embedding(ids, embed) * scale,
                  target_hidden=target_hidden[None].to(embed.dtype))[:, 1 - b:, :]
        path, cand, q = model.propose(z, ids[:, 0], head, temperature)
        logits = model.compute_logits(z, head)
    return dict(hidden=z[0], logits=logits[0], path=path[0], candidates=cand[0], q=None if q is None else q[0])


class LoadRefused(Exception):
    """The stand-in loader would not run this checkpoint as the model it describes."""


def load(path: str | Path, dtype=torch.float32) -> DFlash2DraftModel:
    """``DFlash2DraftModel.from_pretrained(path, dtype=...)`` (transformers' loader with z-lab's
    ``key_mapping``). transformers only warns about missing, unexpected or mis-shaped tensors;
    here any of them raises :class:`LoadRefused`."""
    try:
        model, info = DFlash2DraftModel.from_pretrained(str(path), dtype=dtype, output_loading_info=True)
    except Exception as e:
        raise LoadRefused(f"from_pretrained: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")}
    if bad:
        raise LoadRefused(f"from_pretrained: {bad}")
    return model.eval()
