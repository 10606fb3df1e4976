"""Stand-in for TensorRT-LLM's DFlash 2 functions (tests only).

TensorRT-LLM cannot be installed here and ``/work/shared/trtllm_src`` omits these functions
(its ``modeling_dflash_excerpt.py`` marks them ``[omitted ...]``), so they are transcribed, one
for one, from:

    repository  amukkara/TensorRT-LLM
    path        tensorrt_llm/_torch/models/modeling_dflash.py
    commit      d70a22876d5b0b13dcd5fee18e6dba2331c000a6

Transcribed there, each below under its own name, same arguments, same tensor operations
and dtype handling, same refusals:

- ``_is_dflash2_architecture(config)``           module function
- ``dflash2_grouped_conv(...)``                  module function
- ``dflash2_score_edges(...)``                   module function
- ``dflash2_walk_candidate_paths(...)``          module function
- ``DFlash2BlockConv`` (``__init__``, ``_convolve``, ``prepare``, ``finish``)
- ``DFlash2CandidateSelector`` (``__init__``, ``forward``)
- ``DFlashForCausalLM`` methods ``_validate_dflash2_config``, ``is_dflash2``,
  ``has_block_conv``, ``has_candidate_selector``, ``select_candidate_path``: only these; the
  class's ``__init__`` needs CUDA and a backbone, so tests build it with ``__new__`` and set
  the attributes those methods read (``_dflash2_conv_taps``, ``_dflash2_conv_group_size``,
  ``_dflash2_selector_rank``, ``_dflash2_selector_top_k``, ``_is_dflash2``,
  ``attention_convs``, ``candidate_selector``), as TensorRT-LLM's own unit test does.

Nothing here exists that the real module lacks. Not transcribed: ``__init__``,
``_load_dflash2_weights`` (moves weights to CUDA), ``dflash_forward`` (CUDA attention), and
``tensorrt_llm/_torch/speculative/dflash.py`` (``DFlashWorker._dflash2_global_top_k``: at one
rank it is ``torch.topk(gen_logits, top_k, dim=-1)``; tests call that directly).
"""

import torch
import torch.nn.functional as F
from torch import nn


def _is_dflash2_architecture(config) -> bool:
    return any(
        "dflash2" in str(arch).lower().replace("_", "").replace("-", "")
        for arch in (getattr(config, "architectures", None) or [])
    )


def dflash2_grouped_conv(hidden_states, delta, base_kernel, block_size, group_size):
    taps, hidden_size = base_kernel.shape
    num_groups = hidden_size // group_size
    blocks = hidden_states.unflatten(-1, (num_groups, group_size))
    coefficients = base_kernel.view(1, taps, num_groups, group_size) + delta.unsqueeze(-1)
    output = coefficients[:, 0] * blocks
    if taps > 1:
        position = torch.arange(hidden_states.shape[0], device=hidden_states.device) % block_size
        for tap in range(1, taps):
            shifted = F.pad(blocks[:-tap], (0, 0, 0, 0, tap, 0))
            output += coefficients[:, tap] * shifted * (position >= tap).view(-1, 1, 1)
    return output.flatten(-2)


def dflash2_score_edges(predecessor_codebook, successor_codebook, candidate_ids,
                        unary_logits, gate, anchor_token_ids):
    top_k = candidate_ids.shape[-1]
    successors = successor_codebook[candidate_ids].float()
    predecessor_ids = torch.cat(
        (anchor_token_ids[:, None, None].expand(-1, 1, top_k), candidate_ids[:, :-1]), dim=1
    )
    predecessors = predecessor_codebook[predecessor_ids].float()
    return unary_logits.float()[:, :, None] + torch.einsum(
        "blpr,blcr->blpc", predecessors * gate.float()[:, :, None], successors
    )


def dflash2_walk_candidate_paths(candidate_ids, edge_scores):
    batch, num_steps, top_k, _ = edge_scores.shape
    realized = edge_scores.new_empty(batch, num_steps, top_k)
    predecessor = torch.zeros(batch, 1, 1, dtype=torch.long, device=edge_scores.device)
    for step in range(num_steps):
        scores = edge_scores[:, step].gather(1, predecessor.expand(-1, 1, top_k)).squeeze(1)
        realized[:, step] = scores
        predecessor = scores.argmax(-1).view(batch, 1, 1)
    return realized


class DFlash2BlockConv(nn.Module):
    def __init__(self, base_kernel, kernel_projection_weight, taps, group_size, hidden_size):
        super().__init__()
        if tuple(base_kernel.shape) != (2, taps, hidden_size):
            raise ValueError(
                f"DFlash2 conv base_kernel has shape "
                f"{tuple(base_kernel.shape)}, expected [2, conv_kernel_size, "
                f"hidden_size] = {(2, taps, hidden_size)}."
            )
        if hidden_size % group_size:
            raise ValueError(
                f"DFlash2 conv_group_size={group_size} must divide hidden_size={hidden_size}."
            )
        self.taps = taps
        self.group_size = group_size
        self.num_groups = hidden_size // group_size
        expected = (2 * taps * self.num_groups, hidden_size)
        if tuple(kernel_projection_weight.shape) != expected:
            raise ValueError(
                f"DFlash2 conv kernel_projection has shape "
                f"{tuple(kernel_projection_weight.shape)}, expected "
                f"[2 * conv_kernel_size * hidden_size / conv_group_size, "
                f"hidden_size] = {expected}."
            )
        self.base_kernel = nn.Parameter(base_kernel, requires_grad=False)
        self.kernel_projection = nn.Linear(
            hidden_size, expected[0], bias=False,
            device=kernel_projection_weight.device, dtype=kernel_projection_weight.dtype,
        )
        self.kernel_projection.weight.data.copy_(kernel_projection_weight)

    def _convolve(self, hidden_states, delta, side, block_size):
        return dflash2_grouped_conv(
            hidden_states, delta, self.base_kernel[side], block_size, self.group_size
        )

    def prepare(self, hidden_states, block_size):
        coefficients = self.kernel_projection(hidden_states).view(
            hidden_states.shape[0], 2, self.taps, self.num_groups
        )
        return (
            self._convolve(hidden_states, coefficients[:, 0], 0, block_size),
            coefficients[:, 1],
        )

    def finish(self, hidden_states, coefficients, block_size):
        return self._convolve(hidden_states, coefficients, 1, block_size)


class DFlash2CandidateSelector(nn.Module):
    def __init__(self, predecessor_codebook, successor_codebook, hidden_projection_weight,
                 top_k, vocab_size, rank):
        super().__init__()
        for name, table in (
            ("predecessor_codebook", predecessor_codebook),
            ("successor_codebook", successor_codebook),
        ):
            if tuple(table.shape) != (vocab_size, rank):
                raise ValueError(
                    f"DFlash2 {name} has shape {tuple(table.shape)}, expected "
                    f"[vocab_size, selector_rank] = ({vocab_size}, {rank})."
                )
        if tuple(hidden_projection_weight.shape)[0] != rank:
            raise ValueError(
                "DFlash2 candidate_selector.hidden_projection has shape "
                f"{tuple(hidden_projection_weight.shape)}, expected "
                f"selector_rank={rank} output features."
            )
        self.top_k = top_k
        self.predecessor_codebook = nn.Parameter(predecessor_codebook, requires_grad=False)
        self.successor_codebook = nn.Parameter(successor_codebook, requires_grad=False)
        self.hidden_projection = nn.Linear(
            hidden_projection_weight.shape[1], rank, bias=False,
            device=hidden_projection_weight.device, dtype=hidden_projection_weight.dtype,
        )
        self.hidden_projection.weight.data.copy_(hidden_projection_weight)

    def forward(self, candidate_ids, unary_logits, hidden_states, anchor_token_ids):
        gate = self.hidden_projection(hidden_states.to(self.hidden_projection.weight.dtype))
        return dflash2_score_edges(
            self.predecessor_codebook,
            self.successor_codebook,
            candidate_ids,
            unary_logits,
            gate,
            anchor_token_ids,
        )


class DFlashForCausalLM(nn.Module):
    """Only the DFlash 2 methods listed in the module docstring."""

    def _validate_dflash2_config(self) -> None:
        required = {
            "conv_kernel_size": self._dflash2_conv_taps,
            "conv_group_size": self._dflash2_conv_group_size,
            "selector_rank": self._dflash2_selector_rank,
            "selector_top_k": self._dflash2_selector_top_k,
        }
        missing = sorted(name for name, value in required.items() if value < 1)
        if missing:
            raise ValueError(
                "DFlash 2 drafter is missing required dflash_config entries "
                f"{missing}; got {required}."
            )
        if self._dflash2_selector_top_k < 2:
            raise ValueError(
                f"DFlash 2 selector_top_k={self._dflash2_selector_top_k} leaves "
                "no candidates to choose between; it must be at least 2."
            )

    @property
    def is_dflash2(self) -> bool:
        return self._is_dflash2

    @property
    def has_block_conv(self) -> bool:
        return self.attention_convs is not None

    @property
    def has_candidate_selector(self) -> bool:
        return self.candidate_selector is not None

    def select_candidate_path(self, block_logits, candidate_ids, unary_logits,
                              block_hidden_states, anchor_token_ids):
        edge_scores = self.candidate_selector(
            candidate_ids, unary_logits, block_hidden_states, anchor_token_ids
        )
        realized_scores = dflash2_walk_candidate_paths(candidate_ids, edge_scores)
        block_logits.fill_(float("-inf"))
        block_logits.scatter_(-1, candidate_ids, realized_scores.to(block_logits.dtype))
        return block_logits
