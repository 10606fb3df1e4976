"""Stand-in of ``DecoderModel`` / ``DecoderModelForCausalLM`` (``tensorrt_llm._torch.models.modeling_utils``):
the constructors transcribed, the weight loading TensorRT-LLM's own (verbatim excerpt, below)."""

import os

import torch
from torch import nn

from .embedding import Embedding, LMHead  # noqa: F401  (Embedding: re-exported for the stand-in models)
from .linear import Linear


class DecoderModel(nn.Module):
    """Reproduces NVIDIA/TensorRT-LLM modeling_utils.py (index id 5904819667) ``DecoderModel.__init__``:
    ``self.dtype = model_config.pretrained_config.torch_dtype``, ``self.model_config``."""

    def __init__(self, model_config):
        super().__init__()
        self.dtype = getattr(model_config.pretrained_config, "torch_dtype", None)
        self.model_config = model_config


def _excerpt_namespace(name="_deep_modeling_utils", arch_to_module=None):
    """``deep/modeling_utils_excerpt.py`` executed in a fresh namespace named ``name`` (here for its
    ``load_weights`` / ``_load_weights_impl``; ``models/modeling_utils.py`` executes it again as the
    module whose registries the process uses, with ``arch_to_module`` its ``MODEL_ARCH_TO_MODULE``).
    Names it imports, as ``deep/loader.py`` supplies them: the stand-in ``ModelConfig`` (what
    ``_load_weights_impl``'s ``isinstance`` check must accept), the loader's ``torch_proxy``
    (``torch.cuda.set_device`` a no-op), ``local_mpi_rank`` 0, and stubs for what an unquantized,
    LoRA-free drafter without pipeline parallelism never reaches."""
    import importlib
    import inspect
    import os
    import typing

    from tqdm import tqdm

    from tensorrt_llm.logger import logger

    from ..._deep import loader, run
    from .linear import TensorParallelMode, WeightMode
    from .rms_norm import RMSNorm

    ld = loader()

    def not_excerpted(what):
        def f(*a, **k):
            raise NotImplementedError(f"stub: {what} is not excerpted")
        return f

    class _ModelConfigBinding(type):  # the stand-in model_config imports this module: bound at use
        def __instancecheck__(cls, obj):
            from ..model_config import ModelConfig as real

            return isinstance(obj, real)

    ModelConfig = _ModelConfigBinding("ModelConfig", (), {})

    return run("modeling_utils_excerpt.py", dict(
        __name__=name, torch=ld.torch_proxy(), nn=nn, os=os, inspect=inspect, importlib=importlib,
        Any=typing.Any, Callable=typing.Callable, Dict=typing.Dict, Generic=typing.Generic, List=typing.List,
        Optional=typing.Optional, Tuple=typing.Tuple, Type=typing.Type, TypeVar=typing.TypeVar, Union=typing.Union,
        tqdm=tqdm, logger=logger, ModelConfig=ModelConfig, TConfig=typing.TypeVar("TConfig"), QuantConfig=ld.QuantConfig,
        Embedding=Embedding, LMHead=LMHead, RMSNorm=RMSNorm, Linear=Linear, TensorParallelMode=TensorParallelMode,
        WeightMode=WeightMode, LogitsProcessor=lambda: None, HfLoraLoader=not_excerpted("HfLoraLoader"),
        split_matrix_tp=not_excerpted("split_matrix_tp"), skip_forward=not_excerpted("skip_forward"),
        MoE=type("MoE", (nn.Module,), {}), local_mpi_rank=lambda: 0, MODEL_ARCH_TO_MODULE=arch_to_module or {},
        rename_weights_with_regex=not_excerpted("rename_weights_with_regex"),
        _load_weights_impl_v2=not_excerpted("_load_weights_impl_v2")), future_annotations=True)


_MU = _excerpt_namespace()
filter_weights, duplicate_kv_weight = _MU["filter_weights"], _MU["duplicate_kv_weight"]
#: _load_weights_impl's parallel branch (run_concurrently) is not excerpted; the serial branch, which
#: TensorRT-LLM takes under this variable, makes the same per-module calls
os.environ.setdefault("TRT_LLM_DISABLE_LOAD_WEIGHTS_IN_PARALLEL", "1")


def _tie_block():
    """The excerpt's ``tie_word_embeddings`` block of ``DecoderModelForCausalLM.__init__`` (amukkara
    modeling_utils.py @ 6d5e1f4d, executed from ``$DRAFTSMITH_TRTLLM_SRC`` through ``excerpts.py``)."""
    import sys
    from pathlib import Path

    here = str(Path(__file__).resolve().parents[4])  # tests/upstream/trtllm (excerpts.py)
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

    ``load_weights`` is TensorRT-LLM's own (``deep/modeling_utils_excerpt.py``: N ``DecoderModelForCausalLM.load_weights``
    -> A ``_load_weights_impl`` @ 6d5e1f4d, with ``duplicate_kv_weight`` and ``filter_weights``), executed verbatim."""

    def __init__(self, model: nn.Module, *, config, hidden_size: int, vocab_size: int):
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

    #: TensorRT-LLM's own ``DecoderModelForCausalLM.load_weights`` (-> ``_load_weights_impl``), verbatim
    load_weights = _MU["DecoderModelForCausalLM"].load_weights
