"""Stand-in of ``RopeParams`` (``tensorrt_llm._torch.attention.backends.interface``).

Reproduces NVIDIA/TensorRT-LLM, ``tensorrt_llm/_torch/attention/backends/interface.py`` @
``b386a7fff981548964f58eb5f7e2a8e015c661bb``, ``RopeParams``: a keyword-only dataclass (positional
construction raises ``TypeError``) with ``dim`` (rotary dim, default 0), ``theta`` (10000.0),
``max_positions`` (1024) among its fields (scaling fields not reproduced: only unscaled RoPE);
``from_config(config)`` reads ``max_position_embeddings`` unconditionally (``AttributeError`` when
absent), ``rope_theta`` (default 10000.0), and the rotary dim from ``rotary_dim``, else
``rotary_emb_base``, else ``qk_rope_head_dim``, else ``head_dim * (rotary_pct or
partial_rotary_factor or 1.0)`` with ``head_dim`` from the config or ``hidden_size //
num_attention_heads``. Earlier commits define it in ``tensorrt_llm/_torch/attention_backend/
interface.py``; ``tensorrt_llm/_torch/attention/rotary_embedding.py`` imports it in both layouts
(@ ``047098b74c51f488abcfcd72f7d4a988a56442f6`` and @ ``b744e0a52a48450e1b2da435494f602fcd45a1b3``).
"""

from dataclasses import dataclass


@dataclass(kw_only=True, unsafe_hash=True)
class RopeParams:
    dim: int = 0
    theta: float = 10000.0
    max_positions: int = 1024

    @staticmethod
    def from_config(config) -> "RopeParams":
        hd = getattr(config, "head_dim", None)
        if not isinstance(hd, int):
            hd = config.hidden_size // config.num_attention_heads
        pct = getattr(config, "rotary_pct", None) or getattr(config, "partial_rotary_factor", None) or 1.0
        dim = (getattr(config, "rotary_dim", None) or getattr(config, "rotary_emb_base", None)
               or getattr(config, "qk_rope_head_dim", None) or int(hd * pct))
        return RopeParams(dim=dim, theta=float(getattr(config, "rope_theta", None) or 10000.0),
                          max_positions=config.max_position_embeddings)
