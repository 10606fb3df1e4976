"""Stand-in of the built-in GQA backbones the DFlash drafters of qwen3/llama type resolve to.

Reproduces the module structure TensorRT-LLM's ``Qwen3ForCausalLM`` / ``LlamaForCausalLM`` give
DFlashForCausalLM (``model.embed_tokens``, ``model.layers[i].{input_layernorm, self_attn,
post_attention_layernorm, mlp}``, ``model.norm``, ``lm_head``): Qwen3 builds plain ``q_norm`` /
``k_norm`` RMSNorms over ``head_dim``, Llama none; SwiGLU ``GatedMLP``; plain RMSNorms.
The real modeling_qwen3.py / modeling_llama.py bodies were not read (NVIDIA/TensorRT-LLM,
tensorrt_llm/_torch/models/modeling_qwen3.py); structure assumed from what
modeling_dflash.py @ d70a2287 reads.
"""

from types import SimpleNamespace

from torch import nn

from ..modules.attention import Attention
from ..modules.decoder_model import DecoderModelForCausalLM, Embedding
from ..modules.gated_mlp import GatedMLP
from ..modules.rms_norm import RMSNorm
from ..attention.backends.interface import RopeParams
from .modeling_utils import register_auto_model


def _layer(model_config, idx, qk_norm: bool):
    c = model_config.pretrained_config
    hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    layer = nn.Module()
    layer.input_layernorm = RMSNorm(hidden_size=c.hidden_size, eps=c.rms_norm_eps)
    layer.post_attention_layernorm = RMSNorm(hidden_size=c.hidden_size, eps=c.rms_norm_eps)
    attn = Attention(hidden_size=c.hidden_size, num_attention_heads=c.num_attention_heads,
                     num_key_value_heads=c.num_key_value_heads,
                     max_position_embeddings=c.max_position_embeddings,
                     bias=bool(getattr(c, "attention_bias", False)),
                     pos_embd_params=SimpleNamespace(rope=RopeParams.from_config(c)),
                     layer_idx=idx, config=model_config, head_dim=hd)
    if qk_norm:
        attn.q_norm = RMSNorm(hidden_size=hd, eps=c.rms_norm_eps)
        attn.k_norm = RMSNorm(hidden_size=hd, eps=c.rms_norm_eps)
    layer.self_attn = attn
    layer.mlp = GatedMLP(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size)
    return layer


class _GQAModel(nn.Module):
    def __init__(self, model_config, qk_norm):
        super().__init__()
        c = model_config.pretrained_config
        self.embed_tokens = Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([_layer(model_config, i, qk_norm) for i in range(c.num_hidden_layers)])
        self.norm = RMSNorm(hidden_size=c.hidden_size, eps=c.rms_norm_eps)


@register_auto_model("Qwen3ForCausalLM")
class Qwen3ForCausalLM(DecoderModelForCausalLM):
    def __init__(self, model_config):
        c = model_config.pretrained_config
        super().__init__(_GQAModel(model_config, True), config=model_config, hidden_size=c.hidden_size, vocab_size=c.vocab_size)


@register_auto_model("LlamaForCausalLM")
class LlamaForCausalLM(DecoderModelForCausalLM):
    def __init__(self, model_config):
        c = model_config.pretrained_config
        super().__init__(_GQAModel(model_config, False), config=model_config, hidden_size=c.hidden_size, vocab_size=c.vocab_size)
