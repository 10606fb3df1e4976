"""``tensorrt_llm._torch.modules.linear``: TensorRT-LLM's own ``Linear`` and its loading, executed
verbatim from ``deep/linear_excerpt.py`` (NVIDIA ``_torch/modules/linear.py``, stored file id 3478255898):
``WeightMode``, ``WeightsLoadingConfig``, ``TensorParallelMode``, ``load_weight_shard``, ``copy_weight``,
``copy_weight_shard``, the vanilla / fused q-k-v / fused gate-up load helpers (``allow_partial_loading``
and ``fused_weight_shard_indices_mapping`` as there), ``LinearMethodBase``, ``UnquantizedLinearMethod``,
``Linear`` (``__init__`` with its full signature, ``create_weights``, ``load_weights``, ...).

Stand-in (the excerpt omits it): ``Linear.forward``, same signature as linear.py (id 3478255898)
``forward(self, input, *, all_reduce_params=None, lora_params=None, layer_idx=None)`` and its control
flow for an unquantized, LoRA-free module without the fused GEMM+all-reduce: ROW adds the bias on tp
rank 0 only and all-reduces when ``reduce_output``; COLUMN gathers when ``gather_output``. Where it
calls ``apply_linear`` (``F.linear`` in the weights' dtype) the stand-in computes ``F.linear`` in float32
on the CPU, as the suite's drafting path has always computed.

Stubs as ``deep/loader.py`` gives them (PROVENANCE.md): ``torch`` is the loader's ``torch_proxy``
(``torch.device('cuda')`` is the CPU), ``is_device_integrated``, ``get_model_extra_attrs``,
``mpi_disabled``, ``ipc_nvls_supported``, ``get_sm_version`` (90), ``AllReduceStrategy``,
``AllReduceFusionOp``, ``AllReduceParams``, ``QuantAlgo``, ``LoraLayer``,
``preprocess_weights_for_mixed_gemm``, ``get_quant_method`` (its unquantized branch)."""

import abc as _abc
import dataclasses as _dataclasses
import enum
import math
import os
import types as _types
import typing as _typing

import torch as _torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parameter import Parameter

from ...logger import logger
from ...mapping import Mapping
from ..._deep import loader as _loader, run as _run

_ld = _loader()
torch = _ld.torch_proxy()
# The proxy makes ``torch.device('cuda:0')`` the CPU; on a machine with a GPU, ``Linear.__init__``'s
# capability probe (``torch.cuda.get_device_capability(torch.device('cuda:0'))``) would then ask CUDA
# about the CPU: it asks about the GPU ``cuda:0`` names, as in TensorRT-LLM.
_capability = torch.cuda.get_device_capability
torch.cuda.get_device_capability = lambda device=None: _capability(
    0 if isinstance(device, _torch.device) and device.type == "cpu" else device)
dataclass, ABC, abstractmethod = _dataclasses.dataclass, _abc.ABC, _abc.abstractmethod
Dict, List, Optional, Union = _typing.Dict, _typing.List, _typing.Optional, _typing.Union
QuantConfig = _ld.QuantConfig


def is_device_integrated():  # STUB tensorrt_llm._utils: probes the driver
    return False


def get_model_extra_attrs():  # STUB _torch.utils: no model under construction
    return None


def mpi_disabled():  # STUB tensorrt_llm._utils
    return False


def ipc_nvls_supported():  # STUB tensorrt_llm.bindings (compiled)
    return False


def get_sm_version():  # STUB tensorrt_llm._utils: GPU probe (H200 = SM90)
    return 90


class AllReduceStrategy(enum.IntEnum):  # STUB tensorrt_llm.functional (compiled bindings)
    AUTO = 0


AllReduceFusionOp = _types.SimpleNamespace(NONE=0, RESIDUAL_RMS_NORM=1)  # STUB tensorrt_llm.functional
AllReduceParams = object  # STUB tensorrt_llm.functional
QuantAlgo = _types.SimpleNamespace(W4A8_AWQ="W4A8_AWQ")  # STUB quantization.mode
LoraLayer = object  # STUB peft.lora.layer (no LoRA here)
preprocess_weights_for_mixed_gemm = None  # STUB: weight-only quantization, never reached


def get_quant_method(quant_config=None):
    """STUB for linear.get_quant_method: its unquantized branch only (the quantized methods are not
    excerpted)."""
    if quant_config is None or not quant_config.layer_quant_mode.has_any_quant(exclude_kv_cache=True):
        return UnquantizedLinearMethod()
    raise NotImplementedError("stub: quantized linear methods are not excerpted")


_run("linear_excerpt.py", globals(), future_annotations=True)


def _forward(self, input, *, all_reduce_params=None, lora_params=None, layer_idx=None):
    """STAND-IN for ``Linear.forward`` (omitted by the excerpt); see the module docstring."""
    def linear(bias):
        return F.linear(input.float(), self.weight.float(), None if bias is None else bias.float())

    if self.tp_mode == TensorParallelMode.ROW:
        bias = None if (self.tp_rank > 0) else self.bias
        output = linear(bias)
        if self.reduce_output:
            output = self.all_reduce(output, all_reduce_params=all_reduce_params)
    elif self.tp_mode == TensorParallelMode.COLUMN:
        output = linear(self.bias)
        if self.gather_output:
            from ..distributed import allgather

            output = allgather(output, self.mapping)
    else:
        output = linear(self.bias)
    return output


Linear.forward = _forward
