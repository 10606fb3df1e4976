"""CUDA-graph capture and replay of one draft step (static buffers, fixed batch).

The graph reads the cache's page pools, block tables and ``ctx_lens`` in place, so context
appended after capture (``append_context``) is seen by later replays; only the batch size
``N`` and the weights are fixed. Every layer's lowering must be capturable (no host syncs:
``triton_window_block`` is; ``dense`` and ``window_decode_merge`` read ``ctx_lens`` on the host
and are not).
"""

from __future__ import annotations

import torch

from .dflash import DFlashDraftModel, DraftOutput
from .kv_cache import PagedKVCache


class DraftStepGraph:
    """``model.draft(anchor, cache)`` captured once; :meth:`replay` runs it for new anchors.

    ``warmup``: eager runs on a side stream before capture (Triton compiles there).
    """

    def __init__(self, model: DFlashDraftModel, cache: PagedKVCache, warmup: int = 2):
        if model.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA drafter, got {model.device}")
        self.model, self.cache = model, cache
        self.anchor = torch.zeros(cache.num_seqs, dtype=torch.long, device=model.device)
        side = torch.cuda.Stream(model.device)
        side.wait_stream(torch.cuda.current_stream(model.device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                model.draft(self.anchor, cache)
        torch.cuda.current_stream(model.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                self.out: DraftOutput = model.draft(self.anchor, cache)
        except RuntimeError as e:
            raise RuntimeError(
                f"capturing the draft step failed; lowerings per layer: {model.layer_lowerings} "
                f"(each must be capturable, e.g. triton_window_block): {e}"
            ) from e

    def replay(self, anchor: torch.Tensor) -> DraftOutput:
        """Run the captured step for ``anchor [N]``. The returned tensors are the graph's static
        outputs: valid until the next replay (clone to keep them)."""
        self.anchor.copy_(anchor, non_blocking=True)
        self.graph.replay()
        return self.out
