"""DSpark heads on top of the drafter's final hidden states (drafter reference, section 1, 5-6)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


class Weight(nn.Module):
    """A bare ``weight`` parameter (uninitialised; filled by ``load_weights``)."""

    def __init__(self, *shape: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(shape))


class MarkovHead(nn.Module):
    """Vanilla Markov head: ``bias(prev) = w2 @ w1[prev]``.

    ``markov_w1.weight [V, r]`` (an embedding of the previous token), ``markov_w2.weight [V, r]``.
    """

    def __init__(self, vocab: int, rank: int):
        super().__init__()
        self.markov_w1 = Weight(vocab, rank)
        self.markov_w2 = nn.Linear(rank, vocab, bias=False)

    def embed(self, prev: torch.Tensor) -> torch.Tensor:
        """``w1[prev]``: ``prev [N]`` int -> ``[N, r]``."""
        return F.embedding(prev, self.markov_w1.weight)

    def bias(self, prev_emb: torch.Tensor) -> torch.Tensor:
        """``w2 @ w1[prev]``: ``prev_emb [N, r]`` -> ``[N, V]`` in the weights' dtype (add it to
        float32 logits: the add promotes, with no float32 copy of the bias)."""
        return self.markov_w2(prev_emb)


class ConfidenceHead(nn.Module):
    """``conf = sigmoid(proj([z ; w1[prev]]))`` (``with_markov``) or ``sigmoid(proj(z))``.

    ``proj.weight [1, hidden (+ r)]``, ``proj.bias [1]``.
    """

    def __init__(self, hidden: int, rank: int, with_markov: bool):
        super().__init__()
        self.with_markov = with_markov
        self.proj = nn.Linear(hidden + (rank if with_markov else 0), 1, bias=True)

    def forward(self, z: torch.Tensor, prev_emb: Optional[torch.Tensor]) -> torch.Tensor:
        """``z [..., hidden]`` (final-normed), ``prev_emb [..., r]`` -> ``[...]`` float32 in (0, 1)."""
        if self.with_markov:
            z = torch.cat([z, prev_emb.to(z.dtype)], dim=-1)
        return torch.sigmoid(self.proj(z).float()).squeeze(-1)
