"""Stand-in of the rotary embedding module (``tensorrt_llm._torch.modules.rotary_embedding`` in
NVIDIA/TensorRT-LLM modeling_dflash.py @ 009d8fa4; ``tensorrt_llm._torch.attention.rotary_embedding``
in amukkara/TensorRT-LLM modeling_dflash.py @ d70a2287: both paths are provided)."""

import torch
from torch import nn


class RopeParams:
    """Reproduces ``RopeParams`` as read by the drafter path: ``dim`` (rotary dim), ``theta``,
    ``max_positions``; ``from_config`` reads ``rotary_dim`` (else ``head_dim`` times
    ``partial_rotary_factor``), ``rope_theta``, ``max_position_embeddings``. Not verified beyond
    modeling_minimaxm3.py @ 016beb63 (``RopeParams.from_config(config)``, ``rope.dim``)."""

    def __init__(self, dim, theta, max_positions):
        self.dim, self.theta, self.max_positions = dim, theta, max_positions

    @classmethod
    def from_config(cls, config):
        hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dim = getattr(config, "rotary_dim", None) or int(hd * getattr(config, "partial_rotary_factor", 1.0))
        return cls(dim, float(getattr(config, "rope_theta", 10000.0)),
                   int(getattr(config, "max_position_embeddings", 32768)))

    def __eq__(self, o):
        return isinstance(o, RopeParams) and (self.dim, self.theta, self.max_positions) == (o.dim, o.theta, o.max_positions)

    def __hash__(self):
        return hash((self.dim, self.theta, self.max_positions))


class RotaryEmbedding(nn.Module):
    """Reproduces ``RotaryEmbedding`` as DFlashForCausalLM (modeling_dflash.py @ d70a2287) uses it:
    ``rotary_cos_sin`` of shape ``[max_pos, 2, rot_dim // 2]``, ``is_neox``, ``rope_params``,
    ``head_dim``; ``apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim, is_neox)`` rotates the first
    ``rot_dim`` channels (NeoX: halves) and passes the rest through."""

    def __init__(self, rope_params: RopeParams, head_dim: int, is_neox: bool = True):
        super().__init__()
        self.rope_params, self.head_dim, self.is_neox = rope_params, head_dim, is_neox
        r = rope_params.dim
        inv = 1.0 / (rope_params.theta ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
        ang = torch.arange(rope_params.max_positions, dtype=torch.float64)[:, None] * inv[None, :]
        self.rotary_cos_sin = torch.stack([ang.cos(), ang.sin()], dim=1).float()

    @staticmethod
    def apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1, is_neox=True):
        if not is_neox:
            raise NotImplementedError("stand-in: NeoX rotary only")
        cos, sin = cos.unsqueeze(unsqueeze_dim).float(), sin.unsqueeze(unsqueeze_dim).float()
        half = cos.shape[-1]
        r = 2 * half
        x = x.float()
        x1, x2, rest = x[..., :half], x[..., half:r], x[..., r:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)
