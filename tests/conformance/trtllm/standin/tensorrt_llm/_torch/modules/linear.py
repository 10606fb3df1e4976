"""Stand-in of ``tensorrt_llm._torch.modules.linear``: tensor-parallel ``Linear`` and its unquantized
weight loading.

Reproduces NVIDIA/TensorRT-LLM, ``tensorrt_llm/_torch/modules/linear.py`` (source id 3478255898, commit
not shown by the index): ``TensorParallelMode`` (``split_dim``), ``WeightMode``, ``WeightsLoadingConfig``,
``load_weight_shard`` (slice ``ceil(width / tp)`` along dim 0 for COLUMN, 1 for ROW; 1-D tensors are
not split for ROW; width 1 not split), ``load_weights_vanilla_helper``, ``load_weights_fused_qkv_helper``,
``load_weights_fused_gate_up_helper``, ``copy_weight``, ``UnquantizedLinearMethod.load_weights*``
(the weight-mode dispatch of ``LinearMethodBase.load_weights``), and ``Linear``: ``__init__`` (per-rank
``in_features`` for ROW, ``out_features`` for COLUMN, divisibility asserted; ``all_reduce`` when
``reduce_output``), ``forward`` (ROW: bias on rank 0 only, then the all-reduce; COLUMN: gather when
``gather_output``), ``load_weights`` (dispatch on ``weights_loading_config.weight_mode``).
Not reproduced: quantization, LoRA, fused GEMM+all-reduce, partial loading of fused modules. CPU,
float32 compute (weights are stored as given, computed in float32)."""

import enum
import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
from torch import nn

from ...mapping import Mapping


class TensorParallelMode(str, enum.Enum):
    COLUMN = 'column'
    ROW = 'row'

    @classmethod
    def split_dim(cls, mode):
        return 1 if mode == cls.ROW else 0

    @classmethod
    def flip(cls, mode):
        return cls.ROW if mode == cls.COLUMN else cls.COLUMN


class WeightMode(str, enum.Enum):
    VANILLA = 'vanilla'
    FUSED_QKV_LINEAR = 'fused_qkv_linear'
    FUSED_GATE_UP_LINEAR = 'fused_gate_up_linear'


@dataclass(kw_only=True)
class WeightsLoadingConfig:
    weight_mode: WeightMode = WeightMode.VANILLA
    ignore_tensor_parallel: bool = False


def load_weight_shard(weight, tensor_parallel_size=1, tensor_parallel_rank=0, tensor_parallel_mode=None,
                      device=torch.device('cpu')):
    tensor_shape = weight.shape
    if tensor_parallel_mode is None or tensor_parallel_size <= 1:
        return weight.to(device)
    split_dim = TensorParallelMode.split_dim(tensor_parallel_mode)
    if len(tensor_shape) == 1 and split_dim == 1:
        return weight.to(device)
    width = tensor_shape[split_dim]
    if width == 1:
        return weight.to(device)
    slice_width = math.ceil(width / tensor_parallel_size)
    slice_start = tensor_parallel_rank * slice_width
    slice_end = min((tensor_parallel_rank + 1) * slice_width, width)
    slice_obj = [slice(d) for d in tensor_shape]
    slice_obj[split_dim] = slice(slice_start, slice_end)
    return weight[tuple(slice_obj)].to(device)


def copy_weight(dst, src):
    if dst.dtype != src.dtype:
        src = src.to(dst.dtype)
    dst.data.copy_(src)


def load_weights_vanilla_helper(module, weights: List[Dict], allow_partial_loading=False):
    assert len(weights) == 1
    if not allow_partial_loading:
        assert "weight" in weights[0]
        if module.bias is not None:
            assert "bias" in weights[0]
    device = torch.device('cpu')  # 'cuda' in TensorRT-LLM
    weight = load_weight_shard(weights[0]['weight'], module.tp_size, module.tp_rank, module.tp_mode,
                               device) if "weight" in weights[0] else None
    if weight is not None:
        copy_weight(module.weight, weight)
    if module.bias is not None:
        bias = load_weight_shard(weights[0]['bias'], module.tp_size, module.tp_rank, module.tp_mode,
                                 device) if "bias" in weights[0] else None
        if bias is not None:
            copy_weight(module.bias, bias)


def _fused_helper(module, weights, n):
    assert all('weight' in weights[i] for i in range(n))
    if module.bias is not None:
        assert all('bias' in weights[i] for i in range(n))
    shard = lambda t: load_weight_shard(t, module.tp_size, module.tp_rank, module.tp_mode, torch.device('cpu'))
    ws = [shard(weights[i]['weight']) for i in range(n)]
    if module.bias is not None:
        copy_weight(module.bias, torch.cat([shard(weights[i]['bias']) for i in range(n)]))
    return ws


def load_weights_fused_qkv_helper(module, weights, allow_partial_loading=False):
    assert not allow_partial_loading, "stand-in: partial loading of a fused module is not reproduced"
    return tuple(_fused_helper(module, weights, 3))


def load_weights_fused_gate_up_helper(module, weights, allow_partial_loading=False):
    assert not allow_partial_loading, "stand-in: partial loading of a fused module is not reproduced"
    return tuple(_fused_helper(module, weights, 2))


class UnquantizedLinearMethod:
    def create_weights(self, module, in_features, out_features, bias, dtype):
        module.weight = nn.Parameter(torch.empty((out_features, in_features), dtype=dtype), requires_grad=False)
        if bias:
            module.bias = nn.Parameter(torch.empty((out_features,), dtype=dtype), requires_grad=False)
        else:
            module.register_parameter("bias", None)

    def apply(self, module, input, bias):
        return torch.nn.functional.linear(input.float(), module.weight.float(), None if bias is None else bias.float())

    def load_weights(self, module, weights, weight_mode, allow_partial_loading=False):
        if weight_mode == WeightMode.VANILLA:
            load_weights_vanilla_helper(module, weights, allow_partial_loading=allow_partial_loading)
        elif weight_mode == WeightMode.FUSED_QKV_LINEAR:
            copy_weight(module.weight, torch.cat(load_weights_fused_qkv_helper(module, weights)))
        elif weight_mode == WeightMode.FUSED_GATE_UP_LINEAR:
            copy_weight(module.weight, torch.cat(load_weights_fused_gate_up_helper(module, weights)))
        else:
            raise ValueError(f'unsupported weight mode: {weight_mode}')


class Linear(nn.Module):
    def __init__(self, in_features, out_features, bias=True, dtype=None, mapping: Optional[Mapping] = None,
                 tensor_parallel_mode: Optional[TensorParallelMode] = None, gather_output=False,
                 quant_config=None, weights_loading_config: Optional[WeightsLoadingConfig] = None,
                 reduce_output=True, skip_create_weights_in_init=False, **_):
        from ..distributed import AllReduce

        super().__init__()
        if quant_config is not None:
            raise NotImplementedError("stand-in Linear: quantization is not reproduced")
        self.has_bias = bias
        self.dtype = dtype or torch.float32
        self.mapping = mapping or Mapping()
        self.quant_config = quant_config
        self.weights_loading_config = weights_loading_config or WeightsLoadingConfig()
        self.tp_size = self.mapping.tp_size
        self.tp_rank = self.mapping.tp_rank
        self.tp_mode = tensor_parallel_mode
        self.gather_output = gather_output
        local_in_features, local_out_features = in_features, out_features
        if self.tp_mode == TensorParallelMode.ROW:
            assert in_features % self.tp_size == 0, (
                f'in_features {in_features} must be divisible by tp_size {self.tp_size}')
            local_in_features = in_features // self.tp_size
        elif self.tp_mode == TensorParallelMode.COLUMN:
            assert out_features % self.tp_size == 0, (
                f'out_features {out_features} must be divisible by tp_size {self.tp_size}')
            local_out_features = out_features // self.tp_size
        else:
            assert self.tp_mode is None, f'unsupported tensor parallel mode: {self.tp_mode}'
        self.in_features, self.out_features = local_in_features, local_out_features
        self.all_reduce = AllReduce(mapping=self.mapping, dtype=self.dtype) if reduce_output else None
        self.reduce_output = reduce_output
        self.quant_method = UnquantizedLinearMethod()
        self.quant_method.create_weights(self, self.in_features, self.out_features, bias, self.dtype)

    def forward(self, input, *, all_reduce_params=None, lora_params=None, layer_idx=None):
        if self.tp_mode == TensorParallelMode.ROW:
            bias = None if (self.tp_rank > 0) else self.bias
            output = self.quant_method.apply(self, input, bias)
            if self.reduce_output:
                output = self.all_reduce(output, all_reduce_params=all_reduce_params)
        elif self.tp_mode == TensorParallelMode.COLUMN:
            output = self.quant_method.apply(self, input, self.bias)
            if self.gather_output:
                from ..distributed import allgather

                output = allgather(output, self.mapping)
        else:
            output = self.quant_method.apply(self, input, self.bias)
        return output

    def load_weights(self, weights, allow_partial_loading=False):
        self.quant_method.load_weights(self, weights, self.weights_loading_config.weight_mode,
                                       allow_partial_loading=allow_partial_loading)
