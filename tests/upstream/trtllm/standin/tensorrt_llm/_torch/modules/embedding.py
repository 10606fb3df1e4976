"""Stand-in of ``tensorrt_llm._torch.modules.embedding``: ``LMHead`` and ``Embedding``.

Reproduces NVIDIA/TensorRT-LLM, ``tensorrt_llm/_torch/modules/embedding.py`` @
``06d0733f493698c0855bfed9c3fc00dd198e279c``:

- ``LMHead(num_embeddings, embedding_dim, dtype=None, mapping=None, tensor_parallel_mode=None,
  gather_output=False, use_custom_cublas_mm=False)``, a ``Linear``: no TP mode under attention DP;
  COLUMN keeps ``ceil(vocab / tp)`` rows (vocab split), ROW ``ceil(hidden / tp)`` columns;
  ``padding_size``; ``num_embeddings`` / ``embedding_dim``; no bias.
- ``Embedding(LMHead)`` (same arguments plus ``enable_torch_compile_for_embedding``):
  ``vocab_start_index`` / ``vocab_end_index`` of the rank; ``forward`` (``pre_comm_embedding_ops``):
  COLUMN masks ids outside the rank's vocab slice, looks up, zeroes them, then all-reduces; ROW looks
  up the rank's columns and all-gathers them when ``gather_output``.
Not reproduced: ``torch.compile``, LM-head TP under attention DP, ``skip_forward``, ``load_weights``'s
padding trick (vocab sizes here divide the TP size). CPU, float32 compute."""

import math

import torch
import torch.nn.functional as F
from torch.nn.parameter import Parameter

from ...mapping import Mapping
from .linear import Linear, TensorParallelMode


class LMHead(Linear):
    def __init__(self, num_embeddings, embedding_dim, dtype=None, mapping=None, tensor_parallel_mode=None,
                 gather_output=False, use_custom_cublas_mm=False):
        mapping = mapping or Mapping()
        tp_size = mapping.tp_size
        if mapping.enable_attention_dp:
            tensor_parallel_mode = None
        local_in, local_out = embedding_dim, num_embeddings
        if tensor_parallel_mode == TensorParallelMode.ROW:
            local_in = math.ceil(embedding_dim / tp_size)
            self_padding = tp_size * local_in - embedding_dim
        elif tensor_parallel_mode == TensorParallelMode.COLUMN:
            local_out = math.ceil(num_embeddings / tp_size)
            self_padding = tp_size * local_out - num_embeddings
        else:
            self_padding = 0
        super().__init__(local_in * tp_size, local_out * tp_size, bias=False, dtype=dtype, mapping=mapping,
                         tensor_parallel_mode=tensor_parallel_mode, gather_output=gather_output)
        self.padding_size = self_padding
        if tensor_parallel_mode == TensorParallelMode.ROW and self.tp_rank == self.tp_size - 1:
            local_in -= self.padding_size
        self.in_features, self.out_features = local_in, local_out
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(torch.empty((self.out_features, self.in_features), dtype=dtype), requires_grad=False)
        self.register_parameter("bias", None)


class Embedding(LMHead):
    def __init__(self, num_embeddings, embedding_dim, dtype=None, mapping=None, tensor_parallel_mode=None,
                 gather_output=False, enable_torch_compile_for_embedding=False, use_custom_cublas_mm=False):
        super().__init__(num_embeddings, embedding_dim, dtype=dtype, mapping=mapping,
                         tensor_parallel_mode=tensor_parallel_mode, gather_output=gather_output,
                         use_custom_cublas_mm=use_custom_cublas_mm)
        self.enable_torch_compile_for_embedding = enable_torch_compile_for_embedding
        if self.tp_size > 1:
            width = math.ceil(num_embeddings / self.tp_size)
            self.vocab_start_index = self.tp_rank * width
            self.vocab_end_index = min((self.tp_rank + 1) * width, num_embeddings)
        else:
            self.vocab_start_index, self.vocab_end_index = 0, num_embeddings

    def forward(self, input):
        ids = input
        if self.tp_mode == TensorParallelMode.COLUMN:
            inside = (ids >= self.vocab_start_index) & (ids < self.vocab_end_index)
            ids = inside * (ids - self.vocab_start_index * inside)
        out = F.embedding(ids, self.weight).float()
        if self.tp_mode == TensorParallelMode.COLUMN:
            out = out.masked_fill(~inside.unsqueeze(-1), 0)
        elif self.tp_mode == TensorParallelMode.ROW and self.gather_output:
            if self.tp_rank == self.tp_size - 1 and self.padding_size > 0:
                out = F.pad(out, (0, self.padding_size))
        if self.tp_size > 1:
            if self.tp_mode == TensorParallelMode.COLUMN:
                out = self.all_reduce(out)
            elif self.tp_mode == TensorParallelMode.ROW and self.gather_output:
                from ..distributed import allgather

                out = allgather(out, self.mapping)
                if self.padding_size > 0:
                    out = out[..., :-self.padding_size]
        return out
