"""Stand-in of ``tensorrt_llm._torch.modules.rms_norm``."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    """Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/modules/rms_norm.py, ``RMSNorm``
    (stored version, index id 56200228995): ``RMSNorm(*, hidden_size, eps, dtype, use_gemma)``;
    weight initialised to ones (plain) or zeros (``use_gemma``); output ``rms(x) * w`` or
    ``rms(x) * (1 + w)``; called with a residual it returns ``(norm(x + residual), x + residual)``.
    The fused flashinfer kernels compute the same math; float32 here.
    """

    def __init__(self, *, hidden_size, eps, dtype=None, device=None, has_weights=True, use_gemma=False, **_):
        super().__init__()
        if use_gemma and not has_weights:
            raise ValueError("has_weights must be True if use_gemma is True")
        init = torch.zeros if use_gemma else torch.ones
        self.weight = nn.Parameter(init(hidden_size, dtype=torch.float32), requires_grad=False)
        self.variance_epsilon = eps
        self.use_gemma = use_gemma

    _NO_RESIDUAL = object()

    def forward(self, hidden_states, residual=_NO_RESIDUAL):
        x = hidden_states.float()
        ret_res = residual is not RMSNorm._NO_RESIDUAL
        if ret_res and residual is not None:
            x = x + residual.float()
            residual = x
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        w = self.weight.float()
        y = y * ((1.0 + w) if self.use_gemma else w)
        return (y, residual) if ret_res else y
