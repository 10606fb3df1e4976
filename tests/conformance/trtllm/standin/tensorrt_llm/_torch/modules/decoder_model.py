"""Stand-in of ``DecoderModel`` / ``DecoderModelForCausalLM`` weight loading
(``tensorrt_llm._torch.models.modeling_utils``)."""

import torch
from torch import nn

from ..models.modeling_utils import FUSED_MODULE_COMPONENTS
from .linear import Linear


class Embedding(nn.Module):
    """Reproduces NVIDIA/TensorRT-LLM, ``tensorrt_llm/_torch/modules/embedding.py`` @
    ``06d0733f493698c0855bfed9c3fc00dd198e279c``, ``Embedding``: the constructor signature
    ``(num_embeddings, embedding_dim, dtype=None, mapping=None, tensor_parallel_mode=None,
    gather_output=False, enable_torch_compile_for_embedding=False, use_custom_cublas_mm=False)``
    and a ``weight`` of ``[num_embeddings, embedding_dim]`` looked up by id (no tensor parallelism)."""

    def __init__(self, num_embeddings, embedding_dim, dtype=None, mapping=None, tensor_parallel_mode=None,
                 gather_output=False, enable_torch_compile_for_embedding=False, use_custom_cublas_mm=False):
        super().__init__()
        if mapping is not None and getattr(mapping, "tp_size", 1) != 1:
            raise NotImplementedError("stand-in: no tensor parallelism")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim, dtype=dtype), requires_grad=False)

    def forward(self, ids):
        return self.weight[ids].float()


class DecoderModelForCausalLM(nn.Module):
    """Reproduces the loading contract of ``DecoderModelForCausalLM.load_weights(weights,
    weight_mapper=None, allow_partial_loading=False)`` (modeling_utils.py (index id 57359368733, commit not shown; cb4c622c, cited before, holds filter_weights, not these),
    ``_load_weights_impl``): parameters are filled by name; a fused module
    (``FUSED_MODULE_COMPONENTS``: qkv_proj <- q/k/v_proj, gate_up_proj <- gate/up_proj) is the
    concatenation of its components; with ``allow_partial_loading`` a module absent from the
    checkpoint is skipped (left uninitialised), otherwise its absence raises.

    Constructor as in NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/modeling_utils.py
    (index ids 5904819667, 5772362611): ``__init__(self, model, *, config, hidden_size,
    vocab_size)`` (keyword-only; the class lives in ``modeling_utils``, re-exported there)."""

    def __init__(self, model: nn.Module, *, config=None, hidden_size: int, vocab_size: int):
        super().__init__()
        self.model_config = config
        self.model = model
        self.lm_head = Linear(hidden_size, vocab_size)

    def load_weights(self, weights, weight_mapper=None, allow_partial_loading=False, **_):
        for name, p in self.named_parameters():
            if name in weights:
                t = weights[name]
            else:
                t = None
                for fused, parts in FUSED_MODULE_COMPONENTS.items():
                    if f".{fused}." in name:
                        keys = [name.replace(fused, part) for part in parts]
                        if all(k in weights for k in keys):
                            t = torch.cat([weights[k] for k in keys], 0)
                if t is None:
                    if allow_partial_loading:
                        continue
                    raise KeyError(f"missing weight {name}")
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"{name}: checkpoint shape {tuple(t.shape)} != parameter {tuple(p.shape)}")
            p.data = t.detach().float().clone()
