"""Load a converted drafter checkpoint (docs/converted-format.md) into a host class."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
from safetensors import safe_open

from .target import BorrowedTarget


def read_checkpoint(directory: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(config, weights)`` of a converted checkpoint: ``config.json`` and every tensor of
    ``model.safetensors`` or of the shards listed in ``model.safetensors.index.json`` (CPU)."""
    d = Path(directory)
    if not (d / "config.json").exists():
        raise FileNotFoundError(f"{d} has no config.json (expected a draftsmith-converted checkpoint)")
    config = json.loads((d / "config.json").read_text())
    index = d / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (d / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(f"{d} has neither model.safetensors nor model.safetensors.index.json")
    weights = {}
    for f in files:
        with safe_open(d / f, "pt") as sf:
            for k in sf.keys():
                weights[k] = sf.get_tensor(k)
    return config, weights


def build_drafter(model_cls, checkpoint_dir: str | Path, target_dir: str | Path, device="cpu",
                  dtype: Optional[torch.dtype] = None, lowering: Optional[str] = None):
    """``model_cls(config, device, dtype, lowering)`` with the checkpoint's weights loaded and
    the target's ``embed_tokens``/``lm_head`` borrowed; returns ``(model, target)``."""
    config, weights = read_checkpoint(checkpoint_dir)
    model = model_cls(config, device=device, dtype=dtype, lowering=lowering)
    model.load_weights(weights)
    del weights
    target = BorrowedTarget(target_dir, device=device, dtype=model.dtype)
    model.load_weights_from_target_model(target)
    return model, target
