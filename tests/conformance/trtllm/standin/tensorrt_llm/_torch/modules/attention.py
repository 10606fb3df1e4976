"""Stand-in of ``tensorrt_llm._torch.modules.attention``."""

from types import SimpleNamespace

from torch import nn

from .linear import Linear
from ..attention.rotary_embedding import RopeParams, RotaryEmbedding


class Attention(nn.Module):
    """Reproduces the attributes of ``tensorrt_llm._torch.modules.attention.Attention`` that
    DFlashForCausalLM (modeling_dflash.py @ d70a2287: ``_validate_gqa_shape``, ``_init_rope``,
    ``_build_fused_kv_buffers``, ``dflash_forward``) reads: ``qkv_proj`` (fused [q; k; v]),
    ``o_proj``, ``q_size``, ``kv_size``, ``head_dim``, ``num_heads``, ``num_key_value_heads``,
    ``rotary_emb``, ``pos_embd_params``. Constructor keywords as modeling_minimaxm3.py @
    016beb63 passes them (``max_position_embeddings`` is a required argument there).
    """

    def __init__(self, *, hidden_size, num_attention_heads, num_key_value_heads, max_position_embeddings,
                 bias=False, pos_embd_params=None, layer_idx=None, dtype=None, config=None, head_dim=None, **_):
        super().__init__()
        pc = getattr(config, "pretrained_config", None)
        hd = head_dim or getattr(pc, "head_dim", None) or hidden_size // num_attention_heads
        self.head_dim, self.num_heads, self.num_key_value_heads = hd, num_attention_heads, num_key_value_heads
        self.q_size, self.kv_size = num_attention_heads * hd, num_key_value_heads * hd
        self.layer_idx = layer_idx
        self.max_position_embeddings = max_position_embeddings
        self.qkv_proj = Linear(hidden_size, self.q_size + 2 * self.kv_size, bias=bias)
        self.o_proj = Linear(self.q_size, hidden_size, bias=False)
        rope = pos_embd_params.rope if pos_embd_params is not None else None
        if rope is not None:
            rope = RopeParams(dim=rope.dim, theta=rope.theta, max_positions=max_position_embeddings)
            self.pos_embd_params = SimpleNamespace(rope=rope, is_neox=True)
            self.rotary_emb = RotaryEmbedding(rope, head_dim=hd, is_neox=True)
        else:
            self.pos_embd_params, self.rotary_emb = None, None
