"""Stand-in of ``tensorrt_llm._torch.modules.linear``."""

import torch
from torch import nn


class Linear(nn.Module):
    """Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/modules/linear.py, ``Linear``
    (``Linear(in_features, out_features, bias, dtype, ...)``; ``y = x @ W.T (+ b)``; no tensor
    parallelism, no quantization here). Constructor keyword set not verified beyond the
    arguments modeling_minimaxm3.py @ 016beb63 passes."""

    def __init__(self, in_features, out_features, bias=False, dtype=None, weights_loading_config=None, **_):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        # kept as given (the real one defaults it to WeightsLoadingConfig(); the excerpt's fused-branch
        # check, test_trtllm_p15_fused_load.py, reads an absent one as WeightMode.VANILLA)
        self.weights_loading_config = weights_loading_config
        self.weight = nn.Parameter(torch.empty(out_features, in_features), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_features), requires_grad=False) if bias else None

    def forward(self, x):
        return torch.nn.functional.linear(x.float(), self.weight.float(),
                                          None if self.bias is None else self.bias.float())
