"""The context keys a block can reach, gathered at a size fixed by shapes (no host read).

Used by the torch lowerings (``dense``, ``window_decode_merge``) so that they run inside a CUDA
graph: every size comes from the mask and the cache's shapes, never from ``ctx_lens``' values.

- windowed mask ``W``: ``L = W - 1`` slots, positions ``C_n - (W - 1) .. C_n - 1`` (the farthest
  any block query at ``p >= C_n`` sees);
- full attention: ``L = R * P`` slots (ring pages times page size), positions ``0 .. R*P - 1``.

A slot is ``valid`` when its position is ``0 <= t < C_n``; a sequence is ``recycled`` when the
mask needs a position older than the ring still stores (:meth:`PagedKV.oldest`, computed here on the device; a full-attention
layer whose context outgrew its ``R * P`` slots is recycled too). Invalid slots
read page 0 of the table (any stored value, never used: callers mask them and zero their V).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .base import MaskSpec, PagedKV


class ContextKeys(NamedTuple):
    k: torch.Tensor  # [N, L, Hkv, D] in the pages' dtype; invalid slots hold anything
    v: torch.Tensor  # [N, L, Hkv, D]; invalid slots hold anything
    pos: torch.Tensor  # [N, L] int64 key positions
    valid: torch.Tensor  # [N, L] bool: 0 <= pos < C_n
    recycled: torch.Tensor  # [N] bool: the mask needs a position the ring already overwrote


def oldest(cache: PagedKV) -> torch.Tensor:
    """``[N]`` int64: first position each sequence still stores (:meth:`PagedKV.oldest`, on device)."""
    c = cache.ctx_lens.long()
    p = cache.page_size
    last_page_start = torch.div(c - 1, p, rounding_mode="floor") * p
    return torch.clamp(last_page_start - (cache.ring_pages - 1) * p, min=0)


def span(mask: MaskSpec, cache: PagedKV) -> int:
    """Slots :func:`context_keys` gathers a sequence: ``W - 1`` windowed, ``R * P`` full."""
    return mask.reach if mask.window is not None else cache.ring_pages * cache.page_size


def context_keys(cache: PagedKV, mask: MaskSpec) -> ContextKeys:
    """Gather the reachable context of every sequence (see the module docstring)."""
    c = cache.ctx_lens.long()[:, None]
    dev = cache.k_pages.device
    slots = torch.arange(span(mask, cache), device=dev)[None, :]
    pos = (c - mask.reach + slots) if mask.window is not None else slots.expand(c.shape[0], -1)
    valid = (pos >= 0) & (pos < c)
    first = torch.clamp(c[:, 0] - mask.reach, min=0) if mask.window is not None else torch.zeros_like(c[:, 0])
    recycled = (c[:, 0] > 0) & (first < oldest(cache))
    safe = torch.where(valid, pos, torch.zeros_like(pos))
    p, r = cache.page_size, cache.ring_pages
    pages = cache.block_table.long().gather(1, torch.div(safe, p, rounding_mode="floor") % r)
    off = safe % p
    return ContextKeys(cache.k_pages[pages, off], cache.v_pages[pages, off], pos, valid, recycled)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float):
    """Masked GQA attention of a batch, float32: ``q [N, M, Hq, D]``, ``k``/``v`` ``[N, L, Hkv, D]``,
    ``allowed [N, M, L]``. Returns ``out [N, M, Hq, D]`` float32 and natural ``lse [N, M, Hq]``;
    a row with no allowed key gets ``out = 0``, ``lse = -inf``. Keys no row may see contribute
    nothing even when they hold NaN (their V is zeroed)."""
    n, m, hq, d = q.shape
    hkv = k.shape[2]
    g = hq // hkv
    seen = allowed.any(1)  # [N, L]
    kf = torch.where(seen[..., None, None], k.float(), 0.0)
    vf = torch.where(seen[..., None, None], v.float(), 0.0)
    s = torch.einsum("nmhgd,nlhd->nmhgl", q.float().view(n, m, hkv, g, d), kf) * scale
    s = s.masked_fill(~allowed[:, :, None, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [N, M, Hkv, G]
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    out = torch.einsum("nmhgl,nlhd->nmhgd", p, vf)
    return out.reshape(n, m, hq, d), lse.reshape(n, m, hq)
