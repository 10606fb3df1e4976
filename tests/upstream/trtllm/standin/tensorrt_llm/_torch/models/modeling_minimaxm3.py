"""Stand-in of ``tensorrt_llm._torch.models.modeling_minimaxm3`` (dense layers only)."""

from types import SimpleNamespace

from torch import nn

from ..modules.attention import Attention
from ..modules.decoder_model import DecoderModelForCausalLM, Embedding
from ..modules.gated_mlp import GatedMLP
from ..modules.rms_norm import RMSNorm
from ..attention.backends.interface import RopeParams
from .modeling_utils import register_auto_model


class MiniMaxM3Attention(Attention):
    """Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/models/modeling_minimaxm3.py @
    016beb63, ``MiniMaxM3Attention.__init__`` (dense branch): reads
    ``config.max_position_embeddings`` unconditionally (AttributeError when absent); refuses
    ``qk_norm_type != 'per_head'``; builds ``q_norm`` AND ``k_norm`` with the one flag
    ``use_gemma=config.use_gemma_norm``; partial RoPE (``RopeParams.from_config``)."""

    def __init__(self, *, model_config, layer_idx=None):
        config = model_config.pretrained_config
        super().__init__(hidden_size=config.hidden_size, num_attention_heads=config.num_attention_heads,
                         num_key_value_heads=config.num_key_value_heads,
                         max_position_embeddings=config.max_position_embeddings, bias=False,
                         pos_embd_params=SimpleNamespace(rope=RopeParams.from_config(config)),
                         layer_idx=layer_idx, config=model_config)
        if getattr(config, "qk_norm_type", "per_layer") != "per_head":
            raise ValueError("MiniMaxM3Attention only supports qk_norm_type='per_head'")
        self.use_gemma_norm = bool(getattr(config, "use_gemma_norm", False))
        hd = int(getattr(config, "head_dim", config.hidden_size // config.num_attention_heads))
        self.q_norm = RMSNorm(hidden_size=hd, eps=config.rms_norm_eps, use_gemma=self.use_gemma_norm)
        self.k_norm = RMSNorm(hidden_size=hd, eps=config.rms_norm_eps, use_gemma=self.use_gemma_norm)


class _Layer(nn.Module):
    def __init__(self, model_config, idx):
        super().__init__()
        c = model_config.pretrained_config
        g = bool(getattr(c, "use_gemma_norm", False))
        self.input_layernorm = RMSNorm(hidden_size=c.hidden_size, eps=c.rms_norm_eps, use_gemma=g)
        self.post_attention_layernorm = RMSNorm(hidden_size=c.hidden_size, eps=c.rms_norm_eps, use_gemma=g)
        self.self_attn = MiniMaxM3Attention(model_config=model_config, layer_idx=idx)
        # _build_swiglu_oai_dense_mlp: dense_intermediate_size, swiglu_alpha/limit defaults 1.702/7.0
        self.mlp = GatedMLP(hidden_size=c.hidden_size, intermediate_size=c.dense_intermediate_size,
                            swiglu_alpha=float(getattr(c, "swiglu_alpha", 1.702)), swiglu_beta=1.0,
                            swiglu_limit=float(getattr(c, "swiglu_limit", 7.0)))


class _Model(nn.Module):
    def __init__(self, model_config):
        super().__init__()
        c = model_config.pretrained_config
        g = bool(getattr(c, "use_gemma_norm", False))
        self.embed_tokens = Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([_Layer(model_config, i) for i in range(c.num_hidden_layers)])
        self.norm = RMSNorm(hidden_size=c.hidden_size, eps=c.rms_norm_eps, use_gemma=g)


@register_auto_model("MiniMaxM3SparseForCausalLM")
class MiniMaxM3ForCausalLM(DecoderModelForCausalLM):
    """Reproduces modeling_minimaxm3.py @ 016beb63 ``MiniMaxM3ForCausalLM`` (registered under the
    architecture key ``MiniMaxM3SparseForCausalLM``, as NVIDIA modeling_minimaxm3.py registers it) for an all-dense
    config: layers of MiniMaxM3Attention + swigluoai dense MLP (``dense_intermediate_size``),
    RMSNorms with ``use_gemma=use_gemma_norm`` (the layer norms' flag is assumed to follow
    ``use_gemma_norm`` as q/k do; their construction was not read). Sparse/MoE layers are
    not reproduced (a drafter config has none)."""

    def __init__(self, model_config):
        c = model_config.pretrained_config
        super().__init__(_Model(model_config), config=model_config, hidden_size=c.hidden_size, vocab_size=c.vocab_size)
