"""Test helpers of their own: a float64 attention oracle and a ring-paged cache builder.

Nothing here calls lowering code except constructing the contract's :class:`PagedKV`.
"""

from __future__ import annotations

import math

import torch

from draftsmith.lowering.base import PagedKV


def oracle(q, ctx_k, ctx_v, k_blk, v_blk, causal: bool, window, scale: float):
    """Block attention in float64 from the drafter reference, section 2.

    ``q`` ``[N, B, Hq, D]``; ``ctx_k[n]``/``ctx_v[n]`` ``[C_n, Hkv, D]`` (every context
    position ``0..C_n-1``); ``k_blk``/``v_blk`` ``[N, B, Hkv, D]``. Query ``j`` sits at
    ``C_n + j``. Returns ``out`` ``[N, B, Hq, D]`` and natural ``lse`` ``[N, B, Hq]``, float64.
    """
    n_seq, b, hq, d = q.shape
    outs, lses = [], []
    for n in range(n_seq):
        c = ctx_k[n].shape[0]
        k = torch.cat([ctx_k[n], k_blk[n]]).double()  # key t sits at position t
        v = torch.cat([ctx_v[n], v_blk[n]]).double()
        rep = hq // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)  # [L, Hq, D]
        v = v.repeat_interleave(rep, dim=1)
        p = torch.arange(c, c + b, dtype=torch.float64)[:, None]
        t = torch.arange(c + b, dtype=torch.float64)[None, :]
        ok = torch.ones(b, c + b, dtype=torch.bool)
        if causal:
            ok &= t <= p
        if window is not None:
            ok &= (p - t).abs() <= window - 1
        s = torch.einsum("jhd,thd->hjt", q[n].double(), k) * scale
        s = torch.where(ok, s, -math.inf)
        lse = torch.logsumexp(s, dim=-1)  # [Hq, B]
        w = torch.exp(s - lse[..., None])
        outs.append(torch.einsum("hjt,thd->jhd", w, v))
        lses.append(lse.T)
    return torch.stack(outs), torch.stack(lses)


def ring_pages_for(window, page_size: int, max_ctx: int) -> int:
    """Ring pages a layer gets: ``ceil((W-1)/P) + 1`` windowed, ``>= ceil(C/P)`` full."""
    if window is not None:
        return math.ceil((window - 1) / page_size) + 1
    return max(1, math.ceil(max_ctx / page_size))


def paged_cache(ctx_k, ctx_v, page_size: int, ring_pages: int, gen: torch.Generator, spare: int = 2):
    """Write every context token, in order, into ring pages of a random physical permutation.

    Token ``t`` of sequence ``n`` goes to ``block_table[n, (t // P) % R]``, slot ``t % P``
    (later tokens overwrite recycled ones). Slots never written and ``spare`` pages no
    sequence owns hold NaN, so a lowering that reads outside the stored tokens shows it.
    """
    n_seq = len(ctx_k)
    hkv, d = ctx_k[0].shape[1:]
    total = n_seq * ring_pages + spare
    perm = torch.randperm(total, generator=gen)
    table = perm[: n_seq * ring_pages].view(n_seq, ring_pages).to(torch.int32)
    kp = torch.full((total, page_size, hkv, d), float("nan"), dtype=ctx_k[0].dtype)
    vp = torch.full_like(kp, float("nan"))
    for n in range(n_seq):
        for t in range(ctx_k[n].shape[0]):
            page = int(table[n, (t // page_size) % ring_pages])
            kp[page, t % page_size] = ctx_k[n][t]
            vp[page, t % page_size] = ctx_v[n][t]
    lens = torch.tensor([k.shape[0] for k in ctx_k], dtype=torch.int32)
    return PagedKV(k_pages=kp, v_pages=vp, block_table=table, ctx_lens=lens)


def make_case(seed: int, ctx_lens, b: int, hq: int, hkv: int, d: int, page_size: int, window, dtype):
    """Fresh random inputs (standard normal, never zeros) and their paged cache."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    n_seq = len(ctx_lens)
    ctx_k = [rnd(c, hkv, d) for c in ctx_lens]
    ctx_v = [rnd(c, hkv, d) for c in ctx_lens]
    q, k_blk, v_blk = rnd(n_seq, b, hq, d), rnd(n_seq, b, hkv, d), rnd(n_seq, b, hkv, d)
    ring = ring_pages_for(window, page_size, max(ctx_lens))
    cache = paged_cache(ctx_k, ctx_v, page_size, ring, gen)
    return dict(q=q, k_blk=k_blk, v_blk=v_blk, ctx_k=ctx_k, ctx_v=ctx_v, cache=cache)
