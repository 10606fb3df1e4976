"""Stand-in for DeepSeek's dense DSpark drafter (tests only; no DeepSpec code copied).

DeepSpec is not on PyPI; this module plays its writer from the public source, read for facts
and written anew here:

    repository  deepseek-ai/DeepSpec
    paths       deepspec/modeling/dspark/qwen3/modeling.py @ 5905deb7611cae6aaa0519cd3d048589af101144
                deepspec/modeling/dspark/qwen3/config.py   @ 041b6523e1b0dcaa1f86145790c26ca50acac3f2
                deepspec/modeling/dspark/common.py (``AcceptRatePredictor``), the vanilla Markov head
                deepspec/eval/dspark/evaluator.py @ 3bc8dc7 (``_propose``) and eval/dspark/draft_ops.py
                (``forward_dspark_draft_block``: positions 0..start+B-1, attention_mask None, is_causal False)

Played: ``build_draft_config`` (:func:`build_draft_config`), ``Qwen3DSparkAttention`` (k/v of the
projected context and of the block concatenated, q/k norms, the ``apply_rotary_pos_emb`` that
slices cos/sin to the last ``q_len`` positions for q), ``Qwen3DSparkDecoderLayer``,
``Qwen3DSparkModel`` (its tensors and names, ``_forward_backbone``), the vanilla Markov head
(``markov_w1`` Embedding [V, r], ``markov_w2`` Linear(r, V)), ``AcceptRatePredictor`` (``proj``
Linear(in, 1)) and the greedy proposal (:func:`propose`). Built on transformers' own
``Qwen3RMSNorm``, ``Qwen3MLP``, ``Qwen3RotaryEmbedding``, ``rotate_half`` and
``eager_attention_forward`` (the installed 5.19; DeepSpec pins 5.10.2), with
``save_pretrained`` / ``from_pretrained`` as a ``Qwen3PreTrainedModel``. Not played: training
(anchor sampling, masks, losses), gated / rnn Markov heads, the draft KV cache across rounds.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers.models.qwen3.modeling_qwen3 import (Qwen3MLP, Qwen3PreTrainedModel, Qwen3RMSNorm,
                                                      Qwen3RotaryEmbedding, eager_attention_forward, rotate_half)


def build_draft_config(target_config, *, num_draft_layers: int, block_size: int, mask_token_id: int,
                       target_layer_ids: list[int], num_anchors: int, markov_rank: int,
                       markov_head_type: str = "vanilla", confidence_head_alpha: float = 1.0,
                       confidence_head_with_markov: bool = True):
    """qwen3/config.py ``build_draft_config``: a deep copy of the target's config plus the DSpark keys."""
    c = copy.deepcopy(target_config)
    c.architectures = ["Qwen3DSparkModel"]
    c.num_target_layers = int(target_config.num_hidden_layers)
    c.num_hidden_layers = num_draft_layers
    c.block_size = block_size
    c.tie_word_embeddings = False
    c.layer_types = ["full_attention"] * num_draft_layers
    c.mask_token_id = mask_token_id
    c.target_layer_ids = list(target_layer_ids)
    c.num_anchors = num_anchors
    c.enable_confidence_head = confidence_head_alpha > 0.0
    if c.enable_confidence_head:
        c.confidence_head_with_markov = bool(confidence_head_with_markov)
    c.markov_rank = markov_rank
    if markov_rank > 0:
        c.markov_head_type = markov_head_type
    return c


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    q_len = q.size(-2)
    q_embed = (q * cos[..., -q_len:, :]) + (rotate_half(q) * sin[..., -q_len:, :])
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class Qwen3DSparkAttention(nn.Module):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
        self.num_attention_heads, self.num_key_value_heads = config.num_attention_heads, config.num_key_value_heads
        self.num_key_value_groups = self.num_attention_heads // self.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = False
        h, b = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(h, self.num_attention_heads * self.head_dim, bias=b)
        self.k_proj = nn.Linear(h, self.num_key_value_heads * self.head_dim, bias=b)
        self.v_proj = nn.Linear(h, self.num_key_value_heads * self.head_dim, bias=b)
        self.o_proj = nn.Linear(self.num_attention_heads * self.head_dim, h, bias=b)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.sliding_window = config.sliding_window if config.layer_types[layer_idx] == "sliding_attention" else None

    def forward(self, hidden_states, target_hidden_states, position_embeddings):
        bsz, q_len = hidden_states.shape[:-1]
        ctx_len = target_hidden_states.shape[1]
        q = self.q_norm(self.q_proj(hidden_states).view(bsz, q_len, self.num_attention_heads, self.head_dim))
        q = q.transpose(1, 2)
        k = torch.cat([self.k_proj(target_hidden_states), self.k_proj(hidden_states)], dim=1).view(
            bsz, ctx_len + q_len, self.num_key_value_heads, self.head_dim)
        v = torch.cat([self.v_proj(target_hidden_states), self.v_proj(hidden_states)], dim=1).view(
            bsz, ctx_len + q_len, self.num_key_value_heads, self.head_dim)
        k, v = self.k_norm(k).transpose(1, 2), v.transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        out, _ = eager_attention_forward(self, q, k, v, None, dropout=0.0, scaling=self.scaling,
                                         sliding_window=self.sliding_window)
        return self.o_proj(out.reshape(bsz, q_len, self.num_attention_heads * self.head_dim))


class Qwen3DSparkDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.self_attn = Qwen3DSparkAttention(config, layer_idx)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, target_hidden_states, hidden_states, position_embeddings):
        residual = hidden_states
        hidden_states = residual + self.self_attn(self.input_layernorm(hidden_states), target_hidden_states,
                                                  position_embeddings)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class VanillaMarkovHead(nn.Module):
    def __init__(self, vocab_size: int, markov_rank: int):
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab_size, markov_rank)
        self.markov_w2 = nn.Linear(markov_rank, vocab_size, bias=False)


class AcceptRatePredictor(nn.Module):
    def __init__(self, input_dim: int):
        super().__init__()
        self.proj = nn.Linear(int(input_dim), 1)

    def forward(self, features):
        return self.proj(features).squeeze(-1)


class Qwen3DSparkModel(Qwen3PreTrainedModel):
    _no_split_modules = ["Qwen3DSparkDecoderLayer"]

    def __init__(self, config) -> None:
        super().__init__(config)
        for field in ("target_layer_ids", "mask_token_id", "num_anchors", "enable_confidence_head", "markov_rank"):
            assert hasattr(config, field), f"config.{field} must be provided."
        self.target_layer_ids = config.target_layer_ids
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size,
                                         padding_idx=getattr(config, "pad_token_id", None))
        self.layers = nn.ModuleList([Qwen3DSparkDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)
        self.fc = nn.Linear(len(self.target_layer_ids) * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.block_size, self.mask_token_id = int(config.block_size), config.mask_token_id
        rank = int(config.markov_rank)
        assert rank == 0 or config.markov_head_type == "vanilla", "only the vanilla Markov head is played"
        self.markov_head = VanillaMarkovHead(config.vocab_size, rank) if rank > 0 else None
        self.enable_confidence_head = bool(config.enable_confidence_head)
        self.confidence_head_with_markov = self.enable_confidence_head and bool(config.confidence_head_with_markov)
        self.confidence_head = None
        if self.enable_confidence_head:
            self.confidence_head = AcceptRatePredictor(config.hidden_size + (rank if self.confidence_head_with_markov
                                                                             else 0))
        self.post_init()

    def _forward_backbone(self, *, position_ids, noise_embedding, target_hidden_states):
        hidden_states = noise_embedding
        target_hidden_states = self.hidden_norm(self.fc(target_hidden_states))
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            hidden_states = layer(target_hidden_states, hidden_states, position_embeddings)
        return self.norm(hidden_states)


def propose(model: Qwen3DSparkModel, target_hidden: torch.Tensor, anchor: int):
    """The first greedy proposal after a prompt of ``C`` tokens (``_propose`` +
    ``forward_dspark_draft_block`` + the greedy Markov walk): block ``[anchor, mask x (B-1)]``
    embedded with the drafter's ``embed_tokens`` at positions ``C..C+B-1``, context at ``0..C-1``;
    logits ``lm_head(h_j) + markov_w2(markov_w1[prev])`` with ``prev`` the anchor, then each drafted
    token; confidence ``sigmoid(proj([h_j, markov_w1[prev]]))``. ``target_hidden [C, n*h]``.
    Returns ``(tokens [B], logits [B, V], confidence [B] or None)``."""
    b, c = model.block_size, target_hidden.shape[0]
    ids = torch.full((1, b), model.mask_token_id, dtype=torch.long)
    ids[0, 0] = anchor
    with torch.no_grad():
        h = model._forward_backbone(position_ids=torch.arange(c + b)[None], noise_embedding=model.embed_tokens(ids),
                                    target_hidden_states=target_hidden[None].to(model.fc.weight.dtype))[0]
        base = model.lm_head(h)
        prev, toks, rows, confs = torch.tensor(anchor), [], [], []
        for j in range(b):
            step = base[j]
            emb = model.markov_head.markov_w1(prev) if model.markov_head is not None else None
            if emb is not None:
                step = step + model.markov_head.markov_w2(emb)
            if model.confidence_head is not None:
                feat = torch.cat([h[j], emb]) if model.confidence_head_with_markov else h[j]
                confs.append(torch.sigmoid(model.confidence_head(feat)))
            prev = step.argmax()
            toks.append(prev)
            rows.append(step)
    return torch.stack(toks), torch.stack(rows), (torch.stack(confs) if confs else None)
