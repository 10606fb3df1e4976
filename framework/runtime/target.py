"""The target's shared pieces (token embedding and LM head), loaded without the whole target."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

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
        self.config = json.loads((d / "config.json").read_text())
        tensors = read_tensors(d, [EMBED, HEAD], optional={HEAD} if self.config.get("tie_word_embeddings") else set())
        emb = tensors[EMBED].to(device=device, dtype=dtype or tensors[EMBED].dtype)
        head = tensors.get(HEAD, tensors[EMBED]).to(device=device, dtype=dtype or emb.dtype)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding.from_pretrained(emb, freeze=True)
        self.lm_head = nn.Linear(head.shape[1], head.shape[0], bias=False, device="meta")
        self.lm_head.weight = nn.Parameter(head, requires_grad=False)


def read_tensors(directory: Path, names: list[str], optional: set[str] = frozenset()) -> dict[str, torch.Tensor]:
    """Load ``names`` from ``directory``'s ``model.safetensors`` or its index's shards.

    A name missing and not in ``optional`` raises ``KeyError`` naming the directory.
    """
    index = directory / "model.safetensors.index.json"
    if index.exists():
        where = json.loads(index.read_text())["weight_map"]
    else:
        single = directory / "model.safetensors"
        if not single.exists():
            raise FileNotFoundError(f"{directory} has neither model.safetensors nor model.safetensors.index.json")
        with safe_open(single, "pt") as f:
            where = {k: "model.safetensors" for k in f.keys()}
    out = {}
    for name in names:
        if name not in where:
            if name in optional:
                continue
            raise KeyError(f"{directory} has no tensor {name!r}")
        with safe_open(directory / where[name], "pt") as f:
            out[name] = f.get_tensor(name)
    return out
