"""``dense``: the readable definition of a drafter layer's block attention.

Gather the context K/V the mask can reach (a size fixed by shapes: :mod:`.context_keys`), append
the block K/V, build the explicit boolean mask with :meth:`MaskSpec.allowed`, softmax in float32.
Any device; no host read, so it also runs inside a CUDA graph.

Reads any :class:`PagedKV` (pages of any size): TensorRT-LLM's VANILLA dense arena and the
paged HND pool of TRTLLM/FA4/XQA alike.
"""

from __future__ import annotations

import torch

from .base import MaskSpec, PagedKV
from .context_keys import attend, context_keys


def check_inputs(q: torch.Tensor, cache: PagedKV, k_blk: torch.Tensor, v_blk: torch.Tensor) -> None:
    """Shape checks shared by the lowerings (see the contract in ``base``)."""
    if q.dim() != 4:
        raise ValueError(f"q must be [N, B, Hq, D], got {tuple(q.shape)}")
    n, b, hq, d = q.shape
    hkv = cache.k_pages.shape[2]
    for name, t in (("k_blk", k_blk), ("v_blk", v_blk)):
        if tuple(t.shape) != (n, b, hkv, d):
            raise ValueError(f"{name} must be {(n, b, hkv, d)}, got {tuple(t.shape)}")
    if cache.k_pages.shape[3] != d or cache.v_pages.shape != cache.k_pages.shape:
        raise ValueError(f"cache pages {tuple(cache.k_pages.shape)} do not match head dim {d}")
    if hq % hkv:
        raise ValueError(f"query heads {hq} not a multiple of KV heads {hkv}")
    if cache.block_table.shape[0] != n or cache.ctx_lens.shape[0] != n:
        raise ValueError(f"cache describes {cache.ctx_lens.shape[0]} sequences, q has {n}")


def dense(q, cache: PagedKV, k_blk, v_blk, mask: MaskSpec, scale: float, return_lse: bool = False):
    """Block attention by the definition. Contract and units: ``lowering.base``.

    Sizes come from shapes only (no host read; CUDA-graph capturable): the reachable context is
    gathered at :func:`.context_keys.span` slots a sequence. A sequence whose mask needs a context
    position the ring already recycled gets NaN rows (a full-attention layer needs
    ``ring_pages >= ceil(C/page_size)``), never a silent answer.
    """
    check_inputs(q, cache, k_blk, v_blk)
    n_seq, b, hq, d = q.shape
    ctx = context_keys(cache, mask)
    c = cache.ctx_lens.long()[:, None, None]
    p = c + torch.arange(b, device=q.device)[None, :, None]  # [N, B, 1] query positions
    kpos = torch.cat([ctx.pos, c[:, 0] + torch.arange(b, device=q.device)[None, :]], 1)[:, None, :]
    valid = torch.cat([ctx.valid, torch.ones(n_seq, b, dtype=torch.bool, device=q.device)], 1)[:, None, :]
    k = torch.cat([ctx.k.to(k_blk.dtype), k_blk], 1)
    v = torch.cat([ctx.v.to(v_blk.dtype), v_blk], 1)
    out, lse = attend(q, k, v, valid & mask.allowed(p, kpos), scale)
    bad = ctx.recycled[:, None, None]
    out = torch.where(bad[..., None], float("nan"), out).to(q.dtype)
    lse = torch.where(bad, float("nan"), lse)
    return (out, lse) if return_lse else out
