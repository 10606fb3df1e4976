"""Load a converted drafter checkpoint (docs/converted-format.md) into a host class."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from ..compile.read_back import read_converted
from ..convert import checkpoint
from ..errors import UserError

from .target import BorrowedTarget


def read_checkpoint(directory: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(config, weights)`` of a converted checkpoint (CPU), read through the one hardened
    checkpoint reader (convert/checkpoint.py: regular files, byte limits, index entries that
    stay in the folder, headers checked against the file before any data is read)."""
    return checkpoint.read_checkpoint(Path(directory))


def build_drafter(model_cls, checkpoint_dir: str | Path, target_dir: str | Path, device="cpu",
                  dtype: Optional[torch.dtype] = None, lowering: Optional[str] = None):
    """``model_cls(resolved, device, dtype, lowering)`` (the record of the checkpoint's
    ``config.json``) with the checkpoint's weights loaded and
    the target's ``embed_tokens``/``lm_head`` borrowed; returns ``(model, target)``."""
    config, weights = read_checkpoint(checkpoint_dir)
    model = model_cls(read_converted(config, where=f"{checkpoint_dir}/config.json"), device=device, dtype=dtype,
                      lowering=lowering)
    model.load_weights(weights)
    del weights
    try:
        target = BorrowedTarget(target_dir, device=device, dtype=model.dtype)
        model.load_weights_from_target_model(target)
    except UserError as e:  # the target's problems name the argument that gave it
        lead = f"{target_dir}: "
        raise UserError(*(f"target={target_dir}: {p.removeprefix(lead)}" for p in e.problems)) from None
    return model, target
