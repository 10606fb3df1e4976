"""``trtllm_gen``: window_decode_merge with part A from flashinfer's trtllm-gen decode (SM100/SM103).

Never run here: this machine has no SM100 GPU and no flashinfer. Its merge code path is
shared with ``window_decode_merge`` and tested there with a base-2 decode provider; the
request plumbing below (scratch pages, block tables, sequence lengths) is tested on CPU
against a torch emulation of the kernel's documented contract, not against the kernel.

Facts used (flashinfer ``flashinfer.decode.trtllm_batch_decode_with_kv_cache``):
- ``query`` ``[num_tokens, Hq, D]``; with ``q_len_per_req=1`` one token per request.
- ``kv_cache`` a ``(k, v)`` tuple of ``[num_pages, page_size, Hkv, D]`` with
  ``kv_layout="NHD"`` (trtllm-gen takes a transposed view, no copy).
- ``block_tables`` ``[batch, max_pages]`` int32: token ``t`` of request ``r`` is at slot
  ``t % page_size`` of page ``block_tables[r, t // page_size]`` (linear, no ring).
- ``seq_lens`` ``[batch]``: KV length; the query sits at position ``seq_lens[r] - 1``.
- ``bmm1_scale``: the softmax scale (bf16/fp16 KV: no dequant factors); ``bmm2_scale=1``.
- ``window_left``: inclusive left window, keys ``>= seq_len - 1 - window_left``; -1 = all.
- ``return_lse=True`` (trtllm-gen backend only) returns ``(out, lse)``, ``lse``
  ``[num_tokens, Hq]`` float32 in base 2 (the drafter reference, section 2; flashinfer's
  tests compare it with its wrapper's LSE, which is base 2).
- ``workspace_buffer``: a uint8 buffer, zeroed before its first use.

Cost: the ring cannot hold the block's K/V (the contract keeps them apart and the ring
has no spare slots), so each call copies every sequence's reachable context
(``<= W - 1`` tokens for a windowed layer, all ``C`` for a full one) plus its block into
scratch pages. An engine that reserves scratch pages in its pool would avoid the copy.

Pools: reads any :class:`PagedKV` (pages of any size) through ``PagedKV.gather`` into its
scratch pages: the VANILLA dense arena and the TRTLLM/FA4/XQA paged pools.
"""

from __future__ import annotations

import functools
import math

import torch

from .base import MaskSpec, PagedKV
from .window_decode_merge import window_decode_merge

SCRATCH_PAGE = 32  # tokens per scratch page (a trtllm-gen supported page size)
WORKSPACE_BYTES = 128 * 1024 * 1024


def available() -> bool:
    """True only when flashinfer imports and a CUDA device of capability major 10 exists."""
    try:
        import flashinfer  # noqa: F401
    except Exception:
        return False
    if not torch.cuda.is_available():
        return False
    return any(torch.cuda.get_device_capability(i)[0] == 10 for i in range(torch.cuda.device_count()))


@functools.cache
def _workspace(device: torch.device) -> torch.Tensor:
    return torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)


def flashinfer_decode(**kw):
    """Call ``flashinfer.decode.trtllm_batch_decode_with_kv_cache`` with a cached workspace."""
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache

    return trtllm_batch_decode_with_kv_cache(workspace_buffer=_workspace(kw["query"].device), **kw)


def scratch_requests(q, cache: PagedKV, k_blk, v_blk, window_left: int, page: int = SCRATCH_PAGE):
    """One decode request per block query, over scratch pages holding context + block K/V.

    Sequence ``n``'s scratch holds positions ``lo..C_n+B-1`` (``lo`` the first context
    position any block query sees, so relative positions and the window are preserved);
    request ``(n, j)`` has ``seq_len = C_n - lo + j + 1``. Returns keyword arguments for
    the kernel (``query``, ``kv_cache``, ``block_tables``, ``seq_lens``, ``max_seq_len``).
    """
    n_seq, b, hq, d = q.shape
    hkv = cache.k_pages.shape[2]
    ks, vs, tables, lens = [], [], [], []
    used = 0
    for n in range(n_seq):
        c = int(cache.ctx_lens[n])
        lo = 0 if window_left < 0 else max(0, c - window_left)
        kc, vc = cache.gather(n, lo, c)
        k = torch.cat([kc, k_blk[n].to(kc.dtype)])
        v = torch.cat([vc, v_blk[n].to(vc.dtype)])
        npg = math.ceil(k.shape[0] / page)
        pad = npg * page - k.shape[0]
        ks.append(torch.nn.functional.pad(k, (0, 0, 0, 0, 0, pad)).view(npg, page, hkv, d))
        vs.append(torch.nn.functional.pad(v, (0, 0, 0, 0, 0, pad)).view(npg, page, hkv, d))
        tables += [list(range(used, used + npg))] * b
        lens += [c - lo + j + 1 for j in range(b)]
        used += npg
    width = max(len(t) for t in tables)
    bt = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32, device=q.device)
    return dict(
        query=q.reshape(n_seq * b, hq, d).to(cache.k_pages.dtype),
        kv_cache=(torch.cat(ks), torch.cat(vs)),
        block_tables=bt,
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=q.device),
        max_seq_len=max(lens),
    )


def trtllm_gen_decode_provider(q, cache: PagedKV, k_blk, v_blk, window_left: int, scale: float, *, kernel=None):
    """Part A from trtllm-gen: returns ``out`` ``[N, B, Hq, D]`` and ``lse`` ``[N, B, Hq]``
    float32 in base 2. ``kernel`` defaults to :func:`flashinfer_decode` (tests pass an emulator).
    """
    n_seq, b, hq, d = q.shape
    out, lse = (kernel or flashinfer_decode)(
        **scratch_requests(q, cache, k_blk, v_blk, window_left),
        bmm1_scale=scale,
        bmm2_scale=1.0,
        window_left=window_left,
        kv_layout="NHD",
        backend="trtllm-gen",
        q_len_per_req=1,
        return_lse=True,
    )
    return out.view(n_seq, b, hq, d), lse.view(n_seq, b, hq)


def trtllm_gen(q, cache: PagedKV, k_blk, v_blk, mask: MaskSpec, scale: float, return_lse: bool = False):
    """Block attention on SM100: trtllm-gen decode (base-2 LSE) + block tail + LSE merge.

    Never run here (no SM100, no flashinfer). The merge code path is shared with
    ``window_decode_merge`` and tested there with a base-2 provider.
    """
    return window_decode_merge(
        q, cache, k_blk, v_blk, mask, scale, return_lse, decode=trtllm_gen_decode_provider, lse_base=2
    )
