"""Paged context K/V for the drafter: one page pool per layer, per-sequence ring block tables.

Layout (see ``draftsmith.lowering.base.PagedKV``): layer ``l`` owns
``k_pages[l], v_pages[l]: [num_pages_l, P, Hkv, D]`` and ``block_tables[l]: [N, R_l]`` int32;
``ctx_lens: [N]`` int32 is shared by every layer (all layers hold the same context).

- Windowed layer (window ``W``): ``R = ceil((W - 1) / P) + 1`` pages per sequence, used as a
  ring, so memory is O(W) per sequence whatever the prompt length.
- Full-attention layer: ``R = ceil(max_context / P)`` pages per sequence; nothing wraps.

Sequence ``n`` owns pages ``n*R .. n*R+R-1`` of each pool (static assignment). Pools start
zeroed. Writers may skip positions that can never be visible again (see
:meth:`PagedKVCache.needed_from`); such ring slots hold stale or zero data and are never
inside any query's window.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from ...lowering.base import MaskSpec, PagedKV, window_reach


def ring_pages(window: Optional[int], page_size: int, max_context: Optional[int]) -> int:
    """Pages per sequence: ``ceil((W-1)/P)+1`` for a window ``W``, ``ceil(max_context/P)`` for full."""
    if window is not None:
        return math.ceil(window_reach(window) / page_size) + 1
    if max_context is None:
        raise ValueError("a full-attention layer needs max_context to size its pages")
    return max(1, math.ceil(max_context / page_size))


class PagedKVCache:
    """Context K/V of every drafter layer for ``num_seqs`` sequences.

    ``masks[l]`` decides layer ``l``'s page count; ``max_context`` (tokens per sequence) is
    needed only when some layer has full attention. ``page_size`` ``P >= 1``.
    """

    def __init__(
        self,
        masks: Sequence[MaskSpec],
        num_seqs: int,
        num_kv_heads: int,
        head_dim: int,
        page_size: int = 16,
        max_context: Optional[int] = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ):
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.masks = list(masks)
        self.num_seqs, self.page_size, self.max_context = num_seqs, page_size, max_context
        self.ctx_lens = torch.zeros(num_seqs, dtype=torch.int32, device=device)
        self._ctx_host = [0] * num_seqs  # host mirror of ctx_lens (no device sync to read it)
        self.k_pages, self.v_pages, self.block_tables = [], [], []
        for m in self.masks:
            r = ring_pages(m.window, page_size, max_context)
            shape = (num_seqs * r, page_size, num_kv_heads, head_dim)
            self.k_pages.append(torch.zeros(shape, dtype=dtype, device=device))
            self.v_pages.append(torch.zeros(shape, dtype=dtype, device=device))
            table = torch.arange(num_seqs * r, dtype=torch.int32, device=device).view(num_seqs, r)
            self.block_tables.append(table)

    @property
    def num_layers(self) -> int:
        return len(self.masks)

    def ctx_len(self, seq: int) -> int:
        """Context tokens written so far for sequence ``seq`` (host value)."""
        return self._ctx_host[seq]

    def view(self, layer: int) -> PagedKV:
        """The :class:`PagedKV` a lowering reads for ``layer`` (shares this cache's storage)."""
        return PagedKV(self.k_pages[layer], self.v_pages[layer], self.block_tables[layer], self.ctx_lens)

    def nbytes(self) -> int:
        """Bytes held by all page pools (K and V)."""
        return sum(t.numel() * t.element_size() for t in self.k_pages + self.v_pages)

    def capacity(self, layer: int) -> int:
        """Tokens a sequence's ring holds in ``layer``: ``R * P``."""
        return self.block_tables[layer].shape[1] * self.page_size

    def needed_from(self, layer: int, end: int) -> int:
        """First position whose K/V layer ``layer`` still needs once the context reaches ``end``.

        Windowed (``W``): queries at ``p >= end`` see keys ``>= end - (W-1)``, and later queries
        see even fewer old keys, so older positions are never computed. Full: 0.
        """
        reach = self.masks[layer].reach
        return 0 if reach is None else max(0, end - reach)

    def write(self, layer: int, seq: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k, v: [T, Hkv, D]`` of sequence ``seq`` at positions ``start..start+T-1``.

        A windowed layer's ring keeps only the last ``R * P`` of them (the earlier ones would be
        overwritten at once and are skipped). Does not move ``ctx_lens``; see :meth:`advance`.
        """
        cap = self.capacity(layer)
        if self.masks[layer].window is not None and k.shape[0] > cap:
            drop = k.shape[0] - cap
            k, v, start = k[drop:], v[drop:], start + drop
        t = k.shape[0]
        if t == 0:
            return
        if self.masks[layer].window is None and start + t > cap:
            raise ValueError(
                f"sequence {seq} reaches {start + t} tokens; full-attention layer {layer} holds "
                f"max_context={self.max_context}"
            )
        p = self.page_size
        pos = torch.arange(start, start + t, device=k.device)
        table = self.block_tables[layer][seq].long()
        pages = table[(pos // p) % table.shape[0]]
        slots = pos % p
        self.k_pages[layer][pages, slots] = k.to(self.k_pages[layer].dtype)
        self.v_pages[layer][pages, slots] = v.to(self.v_pages[layer].dtype)

    def advance(self, seq: int, n: int) -> None:
        """Mark ``n`` more context tokens of ``seq`` as written (all layers)."""
        self._ctx_host[seq] += n
        self.ctx_lens[seq] = self._ctx_host[seq]
