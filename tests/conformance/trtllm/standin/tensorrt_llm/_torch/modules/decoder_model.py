"""Stand-in of ``DecoderModel`` / ``DecoderModelForCausalLM`` weight loading
(``tensorrt_llm._torch.models.modeling_utils``)."""

import torch
from torch import nn

from ..models.modeling_utils import FUSED_MODULE_COMPONENTS
from .embedding import Embedding, LMHead  # noqa: F401  (Embedding: re-exported for the stand-in models)
from .linear import Linear


class DecoderModel(nn.Module):
    """Reproduces NVIDIA/TensorRT-LLM modeling_utils.py (index id 5904819667) ``DecoderModel.__init__``:
    ``self.dtype = model_config.pretrained_config.torch_dtype``, ``self.model_config``."""

    def __init__(self, model_config):
        super().__init__()
        self.dtype = getattr(model_config.pretrained_config, "torch_dtype", None)
        self.model_config = model_config


def filter_weights(prefix, weights):
    """Reproduces NVIDIA/TensorRT-LLM modeling_utils.py @ cb4c622c ``filter_weights`` (verbatim in
    ../shared/trtllm_src/modeling_utils_excerpt.py): the entries under ``prefix.``, prefix removed."""
    return {k[len(prefix) + 1:]: v for k, v in weights.items() if k.startswith(prefix + ".")}


def duplicate_kv_weight(weight, num_kv_heads, tensor_parallel_size):
    """Reproduces NVIDIA/TensorRT-LLM modeling_utils.py (index ids 1046435088, 57359368733)
    ``duplicate_kv_weight``: with fewer KV heads than ranks, each KV head's rows repeated
    ``tp / num_kv_heads`` times (so every rank's shard holds one whole head); else unchanged."""
    if num_kv_heads >= tensor_parallel_size:
        assert num_kv_heads % tensor_parallel_size == 0
        return weight
    assert tensor_parallel_size % num_kv_heads == 0
    reps = tensor_parallel_size // num_kv_heads
    if weight.ndim == 1:
        return weight.repeat_interleave(reps)
    assert weight.shape[0] % num_kv_heads == 0
    size_per_kv_head = weight.shape[0] // num_kv_heads
    weight = weight.reshape(num_kv_heads, size_per_kv_head, -1)[:, None, :, :].expand(
        num_kv_heads, reps, size_per_kv_head, weight.shape[1])
    return weight.reshape(num_kv_heads * reps * size_per_kv_head, -1).clone().detach()


PARAMS_MAP = {'qkv_proj': ['q_proj', 'k_proj', 'v_proj'], 'gate_up_proj': ['gate_proj', 'up_proj']}


def _tie_block():
    """The excerpt's ``tie_word_embeddings`` block of ``DecoderModelForCausalLM.__init__`` (amukkara
    modeling_utils.py @ 6d5e1f4d, executed from ``$DRAFTSMITH_TRTLLM_SRC`` through ``excerpts.py``)."""
    import sys
    from pathlib import Path

    here = str(Path(__file__).resolve().parents[4])  # tests/conformance/trtllm (excerpts.py)
    if here not in sys.path:
        sys.path.insert(0, here)
    import excerpts

    global _TIE
    if _TIE is None:
        _TIE = excerpts.loader().modeling_utils()["_tie_block_of_decoder_model_for_causal_lm_init"]
    return _TIE


_TIE = None


class DecoderModelForCausalLM(nn.Module):
    """Constructor as in NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/modeling_utils.py
    (index ids 5904819667, 5772362611): ``__init__(self, model, *, config, hidden_size,
    vocab_size)`` (keyword-only; the class lives in ``modeling_utils``, re-exported there); the
    ``lm_head`` an ``LMHead`` built as index id 1046435088 builds it, then the excerpt's tie block
    when ``tie_word_embeddings``.

    ``load_weights`` reproduces ``_load_weights_impl`` (NVIDIA modeling_utils.py, index id
    1046435088): ``tp_size = 1`` under attention DP else ``mapping.tp_size``; per module with
    parameters: skip ``lm_head`` when ``tie_word_embeddings``; a ``params_map`` module
    (``qkv_proj``, ``gate_up_proj``) gets one filtered dict per component, k/v through
    ``duplicate_kv_weight``, then ``module.load_weights(weights=[...])`` (its weight mode decides);
    any other module with ``load_weights`` gets ``[filter_weights(name)]``; else each parameter is
    copied into in place (``p.data.copy_``, amukkara modeling_utils.py @ 6d5e1f4d: the parameter keeps
    the device and dtype the module was moved to). ``allow_partial_loading`` (the newer signature): a
    module the checkpoint has no entry for is skipped (the drafter's shared ``embed_tokens``/``lm_head``),
    as is a parameter it lacks."""

    def __init__(self, model: nn.Module, *, config=None, hidden_size: int, vocab_size: int):
        super().__init__()
        self.model_config = config
        self.model = model
        # as DecoderModelForCausalLM.__init__ (NVIDIA modeling_utils.py, index id 1046435088): under attention
        # DP an unsharded LMHead without the mapping, else COLUMN over the mapping's TP with lm_head_gather_output
        from .linear import TensorParallelMode

        mapping = getattr(config, "mapping", None)
        dtype = getattr(getattr(config, "pretrained_config", None), "torch_dtype", None)
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        if mapping is None or mapping.enable_attention_dp:
            self.lm_head = LMHead(vocab_size, hidden_size, dtype=dtype)
        else:
            self.lm_head = LMHead(vocab_size, hidden_size, dtype=dtype, mapping=mapping,
                                  tensor_parallel_mode=TensorParallelMode.COLUMN,
                                  gather_output=getattr(config, "lm_head_gather_output", True))
        if getattr(getattr(config, "pretrained_config", None), "tie_word_embeddings", False):
            _tie_block()(self, config)  # TensorRT-LLM's own text (excerpt), as the same __init__ runs it

    @property
    def config(self):
        return self.model_config.pretrained_config

    def load_weights(self, weights, weight_mapper=None, allow_partial_loading=False, skip_modules=(), **_):
        mapping = getattr(self.model_config, "mapping", None)
        tp_size = 1 if (mapping is None or mapping.enable_attention_dp) else mapping.tp_size
        cfg = self.config
        num_kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        for name, module in list(self.named_modules()):
            if len(module._parameters) == 0:
                continue
            if any(s in name for s in skip_modules):
                continue
            if getattr(cfg, "tie_word_embeddings", False) and name.startswith("lm_head"):
                continue
            names = name.split('.')
            if names[-1] in PARAMS_MAP:
                module_weights = []
                for new_name in PARAMS_MAP[names[-1]]:
                    fw = filter_weights('.'.join(names[:-1] + [new_name]), weights)
                    if new_name in ['k_proj', 'v_proj']:
                        fw = {k: duplicate_kv_weight(weight=v[:], num_kv_heads=num_kv_heads, tensor_parallel_size=tp_size)
                              if k in ["weight", "bias"] else v for k, v in fw.items()}
                    module_weights.append(fw)
                if allow_partial_loading and not any(module_weights):
                    continue
                module.load_weights(weights=module_weights)
            else:
                module_weights = filter_weights(name, weights)
                if allow_partial_loading and not module_weights:
                    continue
                if hasattr(module, 'load_weights'):
                    module.load_weights(weights=[module_weights])
                else:
                    for n, p in module.named_parameters(recurse=False):
                        if not allow_partial_loading:
                            assert n in module_weights
                        if n in module_weights:
                            p.data.copy_(module_weights[n][:])  # in place: the module's device and dtype
