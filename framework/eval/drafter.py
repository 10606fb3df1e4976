"""The drafter side of ``draftsmith eval``: the only module that uses the reference host's API.

:class:`Drafter` loads a converted checkpoint (docs/converted-format.md) into the PyTorch
reference host, borrows the target's embedding and LM head, and exposes what the loop
needs: ``reset``, ``append`` (target layer outputs of accepted tokens), ``draft`` (one
greedy step from an anchor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..compile.read_back import read_converted
from ..errors import UserError
from ..runtime import get_host
from ..runtime.loading import read_checkpoint


class Drafter:
    """A converted drafter on the reference host, one sequence at a time.

    ``dtype``: ``None`` keeps the checkpoint's ``torch_dtype``; ``lowering``: one lowering for
    every layer instead of the per-layer table; ``selector``: a DFlash 2 drafter drafts through its
    candidate selector (``False``: the plain argmax of the same drafter; refused without a selector).
    """

    def __init__(self, checkpoint: str | Path, device: torch.device | str = "cpu",
                 dtype: Optional[torch.dtype] = None, lowering: Optional[str] = None, host: str = "torch",
                 selector: bool = True):
        try:
            config, weights = read_checkpoint(checkpoint)
        except FileNotFoundError as e:
            raise UserError(f"checkpoint={checkpoint}: {e}") from None
        if config.get("draftsmith") is None:
            raise UserError(f"checkpoint={checkpoint}: config.json has no 'draftsmith' section "
                            "(not converted; pass adapter=NAME to convert it first)")
        self.resolved = read_converted(config, where=f"{checkpoint}/config.json")
        self.config = config
        #: whether drafts go through DFlash 2's candidate selector (None: the drafter has none)
        self.selector = self.resolved.selector_choice(selector)
        self.target_layer_ids = list(self.resolved.target_layer_ids)  # layer outputs, by the record's contract
        try:
            self.model = get_host(host).model_cls(self.resolved, device=device, dtype=dtype, lowering=lowering)
            self.model.load_weights(weights)
        except (ValueError, KeyError, RuntimeError) as e:
            raise UserError(f"checkpoint={checkpoint}: {str(e).splitlines()[0]}") from None
        self.cache = None

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    @property
    def max_draft_len(self) -> int:
        return self.resolved.max_draft_len

    @property
    def block_size(self) -> int:
        return self.resolved.block_size

    @property
    def context_width(self) -> int:
        """Width of the target features ``fc`` reads: ``len(target_layer_ids) * target_hidden_size``."""
        return self.resolved.dims.num_target_layers * self.resolved.dims.target_hidden

    def layers(self) -> list[dict]:
        """Per layer: ``causal``, ``window`` (``None``: full), ``lowering`` (name), ``rope_theta``."""
        theta = self.resolved.rope.theta
        return [{"causal": m.causal, "window": m.window, "lowering": info.name, "rope_theta": theta}
                for m, info in zip(self.resolved.masks, self.model.lowerings)]

    def borrow(self, shared) -> None:
        """Borrow ``shared.model.embed_tokens`` and ``shared.lm_head`` from the target."""
        try:
            self.model.load_weights_from_target_model(shared)
        except ValueError as e:
            raise UserError(f"target does not fit the drafter: {e}") from None

    def reset(self, max_context: int) -> None:
        """A fresh cache for one sequence of up to ``max_context`` context tokens."""
        self.cache = self.model.make_cache(1, max_context=max_context)

    def append(self, hidden: torch.Tensor) -> None:
        """Append target layer outputs ``[T, context_width]`` of the next ``T`` positions."""
        self.model.append_context(self.cache, hidden, seq=0)

    def draft(self, anchor: int) -> list[int]:
        """Greedy drafts of the ``max_draft_len`` tokens after ``anchor`` (at the next position)."""
        out = self.model.draft(torch.tensor([anchor], dtype=torch.long), self.cache, selector=self.selector is not False)
        return out.tokens[0].tolist()
