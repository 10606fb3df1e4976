"""Stand-in of ``tensorrt_llm._torch.modules.gated_mlp``."""

import torch
from torch import nn

from ...mapping import Mapping
from .linear import Linear, TensorParallelMode, WeightMode, WeightsLoadingConfig


class GatedMLP(nn.Module):
    """Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/modules/gated_mlp.py, ``GatedMLP`` as
    modeling_minimaxm3.py @ 016beb63 (``_build_swiglu_oai_dense_mlp``) uses it: fused
    ``gate_up_proj`` ([gate; up]) and ``down_proj``; without ``swiglu_alpha`` the activation is
    ``silu(g) * u``; with ``swiglu_alpha``/``swiglu_beta``/``swiglu_limit`` it is MiniMax's
    ``swigluoai``: ``g = g.clamp(max=limit)``, ``u = u.clamp(-limit, limit)``,
    ``g * sigmoid(alpha * g) * (u + beta)`` (``_minimax_m3_swiglu_oai``, same file).
    Tensor parallelism as TensorRT-LLM's ``gated_mlp.py`` builds it (the mapping from ``config.mapping``;
    ``gate_up_proj`` COLUMN with ``WeightMode.FUSED_GATE_UP_LINEAR``, ``down_proj`` ROW with the
    all-reduce): recalled from that file, not re-read at a commit here; ``overridden_tp_size`` is not
    reproduced (refused when given). ``gate_up_proj`` carries ``fused_weight_shard_indices_mapping``
    ``{gate: (0, I / tp), up: (I / tp, I / tp)}`` as the newer ``GatedMLP.__init__`` passes it (amukkara
    gated_mlp.py @ e4dc0e3c, ``gateup_shard_indices_mapping``; the stored NVIDIA versions @ 01503f55 and
    90f3bec1 pass none).
    """

    def __init__(self, *, hidden_size, intermediate_size, bias=False, activation=None, dtype=None,
                 config=None, overridden_tp_size=None, reduce_output=True,
                 swiglu_alpha=None, swiglu_beta=None, swiglu_limit=None, **_):
        super().__init__()
        if overridden_tp_size is not None:
            raise NotImplementedError("stand-in GatedMLP: overridden_tp_size is not reproduced")
        mapping = getattr(config, "mapping", None) or Mapping()
        self.intermediate_size = intermediate_size
        self.gate_up_proj = Linear(hidden_size, 2 * intermediate_size, bias=bias, mapping=mapping,
                                   tensor_parallel_mode=TensorParallelMode.COLUMN,
                                   weights_loading_config=WeightsLoadingConfig(weight_mode=WeightMode.FUSED_GATE_UP_LINEAR),
                                   fused_weight_shard_indices_mapping={  # gateup_shard_indices_mapping
                                       "gate": (0, intermediate_size // mapping.tp_size),
                                       "up": (intermediate_size // mapping.tp_size, intermediate_size // mapping.tp_size)})
        self.down_proj = Linear(intermediate_size, hidden_size, bias=bias, mapping=mapping,
                                tensor_parallel_mode=TensorParallelMode.ROW, reduce_output=reduce_output)
        self.swiglu_alpha, self.swiglu_beta, self.swiglu_limit = swiglu_alpha, swiglu_beta, swiglu_limit

    def forward(self, x):
        g, u = self.gate_up_proj(x).chunk(2, dim=-1)
        if self.swiglu_alpha is None:
            a = torch.nn.functional.silu(g) * u
        else:
            lim = self.swiglu_limit
            g, u = g.clamp(max=lim), u.clamp(min=-lim, max=lim)
            a = g * torch.sigmoid(self.swiglu_alpha * g) * (u + self.swiglu_beta)
        return self.down_proj(a)
