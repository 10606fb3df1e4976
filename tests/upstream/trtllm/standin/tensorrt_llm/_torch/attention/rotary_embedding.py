"""Stand-in of ``tensorrt_llm._torch.attention.rotary_embedding`` (where amukkara/TensorRT-LLM
modeling_dflash.py @ d70a2287 imports ``RotaryEmbedding`` from; the module also imports
``RopeParams``, so ``from tensorrt_llm._torch.attention.rotary_embedding import RopeParams``
works in the layouts read)."""

import torch
from torch import nn

from .backends.interface import RopeParams


class RotaryEmbedding(nn.Module):
    """Reproduces NVIDIA/TensorRT-LLM, ``tensorrt_llm/_torch/attention/rotary_embedding.py`` @
    ``b744e0a52a48450e1b2da435494f602fcd45a1b3``, ``RotaryEmbedding``: ``__init__(rope_params, *,
    head_dim, is_neox=True, inverse=False)`` (``head_dim`` keyword-only), ``rotary_cos_sin``
    ``[max_positions, 2, rot_dim // 2]`` (the real one builds it on CUDA through
    ``rope_params.create_rope_const_params``; here float64 -> float32 on CPU, unscaled RoPE only),
    ``apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1, is_neox=True, inverse=False)``: rotates
    the first ``2 * cos.shape[-1]`` channels (NeoX: halves) and passes the rest through."""

    def __init__(self, rope_params: RopeParams, *, head_dim: int, is_neox: bool = True, inverse: bool = False):
        super().__init__()
        self.rope_params, self.head_dim, self.is_neox, self.inverse = rope_params, head_dim, is_neox, inverse
        self.max_positions = rope_params.max_positions
        r = rope_params.dim
        inv = 1.0 / (rope_params.theta ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
        ang = torch.arange(rope_params.max_positions, dtype=torch.float64)[:, None] * inv[None, :]
        self.rotary_cos_sin = torch.stack([ang.cos(), ang.sin()], dim=1).float()

    @staticmethod
    def apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1, is_neox=True, inverse=False):
        if not is_neox:
            raise NotImplementedError("stand-in: NeoX rotary only")
        cos, sin = cos.unsqueeze(unsqueeze_dim).float(), sin.unsqueeze(unsqueeze_dim).float()
        half = cos.shape[-1]
        r = 2 * half
        x = x.float()
        x1, x2, rest = x[..., :half], x[..., half:r], x[..., r:]
        if inverse:
            return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin, rest], dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)
