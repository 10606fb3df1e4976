"""Stand-in of ``tensorrt_llm._torch.modules.attention``."""

from types import SimpleNamespace

from torch import nn

from ...mapping import Mapping
from .linear import Linear, TensorParallelMode, WeightMode, WeightsLoadingConfig
from ..attention.rotary_embedding import RopeParams, RotaryEmbedding


class Attention(nn.Module):
    """Reproduces the attributes of ``tensorrt_llm._torch.modules.attention.Attention`` that
    DFlashForCausalLM (modeling_dflash.py @ d70a2287: ``_validate_gqa_shape``, ``_init_rope``,
    ``_build_fused_kv_buffers``, ``dflash_forward``) reads: ``qkv_proj`` (fused [q; k; v]),
    ``o_proj``, ``q_size``, ``kv_size``, ``head_dim``, ``num_heads``, ``num_key_value_heads``,
    ``rotary_emb``, ``pos_embd_params``. Constructor keywords as modeling_minimaxm3.py @
    016beb63 passes them (``max_position_embeddings`` is a required argument there).

    Per rank as issue 35 reads ``modules/attention.py`` (not re-read at a commit here): ``tp = 1``
    under attention DP, else ``config.mapping.tp_size``; ``num_heads // tp`` query heads,
    ``(num_kv_heads + tp - 1) // tp`` KV heads; ``qkv_proj`` COLUMN with ``WeightMode.FUSED_QKV_LINEAR``
    over ``tp * (q_size + 2 * kv_size)`` rows with ``fused_weight_shard_indices_mapping`` q/k/v at the per-rank
    offsets (NVIDIA attention.py @ 00547a25, ``qkv_shard_indices_mapping``; ``deep/modules_excerpt.py``),
    ``o_proj`` ROW.
    """

    def __init__(self, *, hidden_size, num_attention_heads, num_key_value_heads, max_position_embeddings,
                 bias=False, pos_embd_params=None, layer_idx=None, dtype=None, config=None, head_dim=None, **_):
        super().__init__()
        pc = getattr(config, "pretrained_config", None)
        hd = head_dim or getattr(pc, "head_dim", None) or hidden_size // num_attention_heads
        mapping = getattr(config, "mapping", None) or Mapping()
        tp = 1 if mapping.enable_attention_dp else mapping.tp_size
        if tp != mapping.tp_size:
            mapping = Mapping(world_size=1, rank=0, tp_size=1)
        self.head_dim = hd
        self.num_heads = num_attention_heads // tp
        self.num_key_value_heads = (num_key_value_heads + tp - 1) // tp
        self.q_size, self.kv_size = self.num_heads * hd, self.num_key_value_heads * hd
        self.layer_idx = layer_idx
        self.max_position_embeddings = max_position_embeddings
        self.qkv_proj = Linear(hidden_size, tp * (self.q_size + 2 * self.kv_size), bias=bias, mapping=mapping,
                               tensor_parallel_mode=TensorParallelMode.COLUMN,
                               weights_loading_config=WeightsLoadingConfig(weight_mode=WeightMode.FUSED_QKV_LINEAR),
                               fused_weight_shard_indices_mapping={  # as Attention.__init__ @ 00547a25 passes it
                                   "q": (0, self.q_size), "k": (self.q_size, self.kv_size),
                                   "v": (self.q_size + self.kv_size, self.kv_size)})
        self.o_proj = Linear(tp * self.q_size, hidden_size, bias=False, mapping=mapping,
                             tensor_parallel_mode=TensorParallelMode.ROW)
        rope = pos_embd_params.rope if pos_embd_params is not None else None
        if rope is not None:
            rope = RopeParams(dim=rope.dim, theta=rope.theta, max_positions=max_position_embeddings)
            self.pos_embd_params = SimpleNamespace(rope=rope, is_neox=True)
            self.rotary_emb = RotaryEmbedding(rope, head_dim=hd, is_neox=True)
        else:
            self.pos_embd_params, self.rotary_emb = None, None
