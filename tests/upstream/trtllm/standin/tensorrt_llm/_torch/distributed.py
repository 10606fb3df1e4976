"""Stand-in of ``tensorrt_llm._torch.distributed`` (``AllReduce``, ``allgather``) on ``torch.distributed``.

Behaviour as ``Linear.forward`` uses them (NVIDIA/TensorRT-LLM ``_torch/modules/linear.py``, source id
3478255898): a ROW-parallel ``Linear`` with ``reduce_output`` sums its partial outputs over the
tensor-parallel group (``self.all_reduce(output, all_reduce_params=...)``); a COLUMN-parallel one with
``gather_output`` concatenates the ranks' outputs on the last dim (``allgather(output, self.mapping)``).
The bodies of ``_torch/distributed/ops.py`` were not read: the strategies, fusions and NCCL/MNNVL
kernels are not reproduced; here the sum is ``torch.distributed.all_reduce`` (gloo on CPU)."""

import torch


class AllReduce(torch.nn.Module):
    def __init__(self, mapping, strategy=None, dtype=None):
        super().__init__()
        self.mapping = mapping

    def forward(self, input, *, all_reduce_params=None):
        if self.mapping.tp_size == 1:
            return input
        import torch.distributed as dist

        out = input.contiguous().clone()
        dist.all_reduce(out)
        return out


def allgather(input, mapping, dim=-1):
    if mapping.tp_size == 1:
        return input
    import torch.distributed as dist

    parts = [torch.empty_like(input) for _ in range(mapping.tp_size)]
    dist.all_gather(parts, input.contiguous())
    return torch.cat(parts, dim=dim)
