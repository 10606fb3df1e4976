"""The target's shared pieces (token embedding and LM head), loaded without the whole target."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..convert.checkpoint import locate, read_config, read_tensor

EMBED = "model.embed_tokens.weight"
HEAD = "lm_head.weight"


class BorrowedTarget(nn.Module):
    """What a drafter borrows from its target, shaped like an HF causal LM.

    Reads ``DIR/config.json`` (``.config``) and, from ``DIR/model.safetensors`` (or the shards
    named by ``DIR/model.safetensors.index.json``), ``model.embed_tokens.weight [V, h]`` and
    ``lm_head.weight [V, h]`` only. Exposes ``.model.embed_tokens`` (``nn.Embedding``) and
    ``.lm_head`` (``nn.Linear``, no bias). ``lm_head.weight`` may be absent when the config
    says ``tie_word_embeddings``: the head then shares the embedding.
    """

    def __init__(self, directory: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype | None = None):
        super().__init__()
        d = Path(directory)
        self.config = read_config(d)
        tensors = read_tensors(d, [EMBED, HEAD], optional={HEAD} if self.config.get("tie_word_embeddings") else set())
        emb = tensors[EMBED].to(device=device, dtype=dtype or tensors[EMBED].dtype)
        head = tensors.get(HEAD, tensors[EMBED]).to(device=device, dtype=dtype or emb.dtype)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding.from_pretrained(emb, freeze=True)
        self.lm_head = nn.Linear(head.shape[1], head.shape[0], bias=False, device="meta")
        self.lm_head.weight = nn.Parameter(head, requires_grad=False)


def read_tensors(directory: Path, names: list[str], optional: set[str] = frozenset()) -> dict[str, torch.Tensor]:
    """Load ``names`` from ``directory``'s ``model.safetensors`` or its index's shards, through
    the hardened checkpoint reader (only the shards holding ``names`` are opened). A name
    missing and not in ``optional`` is a one-line :class:`UserError` naming the directory."""
    return {n: read_tensor(st) for n, st in locate(Path(directory), names, optional).items()}
