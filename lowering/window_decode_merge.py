"""``window_decode_merge``: the SM100 lowering of block attention (drafter reference, section 2).

For block query ``j`` (position ``p = C + j``):

- part A: causal attention over context plus block keys ``0..j``, window left ``W-1`` if
  the layer is windowed (else unbounded), computed by a *decode provider*;
- part B: the block keys ``j+1..B-1`` the mask allows (only non-causal masks; else empty);
- merge by log-sum-exp, natural logs: ``out = lerp(out_A, out_B, sigmoid(lse_B - lse_A))``,
  ``lse = logaddexp(lse_A, lse_B)``. An empty part B has ``lse_B = -inf``: the result is
  exactly ``out_A``.

A decode provider is ``decode(q, cache, k_blk, v_blk, window_left, scale) -> (out, lse)``
with ``window_left`` ``W-1`` or ``-1`` (unbounded), ``out`` ``[N, B, Hq, D]`` (any float
dtype) and ``lse`` ``[N, B, Hq]`` float32 in the provider's base (``lse_base``: ``"e"``
for natural logs, ``2`` for base-2 logs such as trtllm-gen's).

Pools: reads any :class:`PagedKV` (pages of any size) through :mod:`.context_keys` (a gather
whose size comes from shapes): the VANILLA dense arena and the TRTLLM/FA4/XQA paged pools.

CUDA graphs: no host read and no size taken from a value, so it captures; its torch ops
allocate their intermediates in the graph's pool.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from .base import MaskSpec, PagedKV
from .context_keys import attend, context_keys
from .dense import check_inputs

DecodeProvider = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def torch_decode_provider(q, cache: PagedKV, k_blk, v_blk, window_left: int, scale: float):
    """Part A in torch: query ``j`` sees keys ``k`` with ``p - window_left <= k <= p``
    (``window_left = -1``: every ``k <= p``) among context and block keys.

    Returns ``out`` ``[N, B, Hq, D]`` float32 and ``lse`` ``[N, B, Hq]`` float32, natural log.
    Sizes come from shapes (:mod:`.context_keys`), no host read; a sequence that needs a
    position the ring already recycled gets NaN rows.
    """
    n_seq, b, hq, d = q.shape
    mask = MaskSpec(causal=True, window=None if window_left < 0 else window_left + 1)
    ctx = context_keys(cache, mask)
    c = cache.ctx_lens.long()[:, None]
    j = torch.arange(b, device=q.device)[None, :]
    p = (c + j)[:, :, None]  # [N, B, 1]
    kpos = torch.cat([ctx.pos, c + j], 1)[:, None, :]
    valid = torch.cat([ctx.valid, torch.ones(n_seq, b, dtype=torch.bool, device=q.device)], 1)[:, None, :]
    k = torch.cat([ctx.k.float(), k_blk.float()], 1)
    v = torch.cat([ctx.v.float(), v_blk.float()], 1)
    out, lse = attend(q, k, v, valid & mask.allowed(p, kpos), scale)
    bad = ctx.recycled[:, None, None]
    return torch.where(bad[..., None], float("nan"), out), torch.where(bad, float("nan"), lse)


def block_tail(q, k_blk, v_blk, mask: MaskSpec, scale: float):
    """Part B: query ``j`` over block keys ``j+1..B-1`` that ``mask`` allows.

    Returns float32 ``out`` ``[N, B, Hq, D]`` and natural ``lse`` ``[N, B, Hq]``; rows with no
    key (causal masks, the last query, ``W = 1``) get ``out = 0``, ``lse = -inf``.
    """
    n_seq, b = q.shape[:2]
    j = torch.arange(b, device=q.device)
    ok = (j[None, :] > j[:, None]) & mask.allowed(j[:, None], j[None, :])
    return attend(q, k_blk, v_blk, ok[None].expand(n_seq, -1, -1), scale)


def merge_lse(out_a, lse_a, out_b, lse_b):
    """Merge two attention partials over disjoint key sets; natural-log LSEs, float32.

    ``out = lerp(out_a, out_b, sigmoid(lse_b - lse_a))``, ``lse = logaddexp(lse_a, lse_b)``.
    ``lse_b = -inf`` (empty part B, whose ``out_b`` must be finite) returns ``out_a`` exactly.
    """
    w = torch.sigmoid(lse_b - lse_a)
    return torch.lerp(out_a.float(), out_b.float(), w[..., None]), torch.logaddexp(lse_a, lse_b)


def window_decode_merge(
    q,
    cache: PagedKV,
    k_blk,
    v_blk,
    mask: MaskSpec,
    scale: float,
    return_lse: bool = False,
    *,
    decode: DecodeProvider = torch_decode_provider,
    lse_base="e",
):
    """Block attention as decode (part A) + block tail (part B) + LSE merge.

    Contract and units: ``lowering.base``. ``decode`` computes part A (see the module
    docstring); ``lse_base`` (``"e"`` or ``2``) is the base of its LSE, converted to
    natural logs (times ``ln 2``) before the merge.
    """
    if lse_base not in ("e", 2):
        raise ValueError(f"lse_base must be 'e' or 2, got {lse_base!r}")
    check_inputs(q, cache, k_blk, v_blk)
    window_left = -1 if mask.window is None else mask.reach
    out_a, lse_a = decode(q, cache, k_blk, v_blk, window_left, scale)
    lse_a = lse_a.float()
    if lse_base == 2:
        lse_a = lse_a * math.log(2.0)
    if mask.causal:
        out, lse = out_a.float(), lse_a
    else:
        out, lse = merge_lse(out_a, lse_a, *block_tail(q, k_blk, v_blk, mask, scale))
    out = out.to(q.dtype)
    return (out, lse) if return_lse else out
