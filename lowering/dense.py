"""``dense``: the readable definition of a drafter layer's block attention.

Per sequence: gather the context K/V the mask can reach, append the block K/V, build the
explicit boolean mask with :meth:`MaskSpec.allowed`, softmax in float32. Any device.

Reads any :class:`PagedKV` (pages of any size): TensorRT-LLM's VANILLA dense arena and the
paged HND pool of TRTLLM/FA4/XQA alike.
"""

from __future__ import annotations

import torch

from .base import MaskSpec, PagedKV


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


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float):
    """Masked GQA attention of one sequence, in float32.

    ``q`` ``[M, Hq, D]``, ``k``/``v`` ``[L, Hkv, D]``, ``allowed`` ``[M, L]`` bool.
    Returns ``out`` ``[M, Hq, D]`` float32 and ``lse`` ``[M, Hq]`` float32 (natural log of
    the sum of exp of scaled scores). A row with no allowed key gets ``out = 0`` and
    ``lse = -inf`` (never NaN).
    """
    m, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv  # query head i uses KV head i // g
    qf = q.float().view(m, hkv, g, d)
    s = torch.einsum("mhgd,lhd->mhgl", qf, k.float()) * scale
    s = s.masked_fill(~allowed[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [m, hkv, g]
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    out = torch.einsum("mhgl,lhd->mhgd", p, v.float())
    return out.reshape(m, hq, d), lse.reshape(m, hq)


def reach(mask: MaskSpec, ctx_len: int) -> int:
    """First context position any block query (at ``p >= ctx_len``) may see."""
    if mask.window is None:
        return 0
    return max(0, ctx_len - mask.reach)


def dense(q, cache: PagedKV, k_blk, v_blk, mask: MaskSpec, scale: float, return_lse: bool = False):
    """Block attention by the definition. Contract and units: ``lowering.base``.

    Raises ``ValueError`` if the mask needs a context position the ring already recycled.
    """
    check_inputs(q, cache, k_blk, v_blk)
    n_seq, b, hq, d = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(n_seq, b, hq, dtype=torch.float32, device=q.device)
    for n in range(n_seq):
        c = int(cache.ctx_lens[n])
        lo = reach(mask, c)
        if lo < cache.oldest(n):
            raise ValueError(
                f"mask {mask} of sequence {n} needs context position {lo}, but the ring "
                f"already recycled it (holds {cache.oldest(n)}..{c - 1}); a full-attention "
                f"layer needs ring_pages >= ceil(C/page_size)"
            )
        kc, vc = cache.gather(n, lo, c)
        k = torch.cat([kc.to(k_blk.dtype), k_blk[n]])
        v = torch.cat([vc.to(v_blk.dtype), v_blk[n]])
        p = torch.arange(c, c + b, device=q.device)
        kpos = torch.arange(lo, c + b, device=q.device)
        o, l = attend(q[n], k, v, mask.allowed(p[:, None], kpos[None, :]), scale)
        out[n] = o.to(q.dtype)
        lse[n] = l
    return (out, lse) if return_lse else out
