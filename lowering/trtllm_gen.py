"""``trtllm_gen``: window_decode_merge with part A from flashinfer's trtllm-gen decode (SM100/SM103).

Never run here: this machine has no SM100 GPU and no flashinfer. Its merge code path is
shared with ``window_decode_merge`` and tested there with a base-2 decode provider; the
request plumbing below (scratch pages, block tables, sequence lengths, ``window_left``) is tested
on CPU against a torch emulation of the kernel's documented contract, not against the kernel.

Facts used (flashinfer ``flashinfer.decode.trtllm_batch_decode_with_kv_cache``):
- ``query`` ``[num_tokens, Hq, D]``; with ``q_len_per_req=1`` one token per request.
- ``kv_cache`` a ``(k, v)`` tuple of ``[num_pages, page_size, Hkv, D]`` with
  ``kv_layout="NHD"``, or of ``[num_pages, Hkv, page_size, D]`` with ``kv_layout="HND"``.
- ``block_tables`` ``[batch, max_pages]`` int32: token ``t`` of request ``r`` is at slot
  ``t % page_size`` of page ``block_tables[r, t // page_size]`` (linear, no ring).
- ``seq_lens`` ``[batch]``: KV length; the query sits at position ``seq_lens[r] - 1``.
- ``bmm1_scale``: the softmax scale (bf16/fp16 KV: no dequant factors); ``bmm2_scale=1``.
- ``window_left``: inclusive left window, keys ``>= seq_len - 1 - window_left``; -1 = all.
- ``return_lse=True`` (trtllm-gen backend only) returns ``(out, lse)``, ``lse``
  ``[num_tokens, Hq]`` float32 in base 2 (the drafter reference, section 2; flashinfer's
  tests compare it with its wrapper's LSE, which is base 2).
- ``workspace_buffer``: a uint8 buffer, zeroed before its first use.

How the requests read the pool (what TensorRT-LLM's SM100 path does: the draft tokens' keys in
pages appended to the sequence's block table, one causal window decode over context + block
prefix), every size from shapes, no host read, nothing allocated beyond what the shapes fix:

- the block's keys go to ``cache.scratch_pages`` (``S = ceil((P - 1 + B) / P)`` pages of the same
  pool a sequence): scratch slot ``i`` holds the context tail (``i < C % P``: the last,
  partly filled context page's tokens, fewer than ``P``) then block key ``i - C % P``;
- request ``(n, j)``'s linear block table (trtllm-gen has no ring) is the sequence's complete
  context pages still stored, in position order (read in place through the ring table), then its
  scratch pages: width ``R + S``; ``seq_len = count * P + C % P + j + 1``; ``window_left`` is
  ``W - 1`` (or -1), so the window sees context + block keys ``0..j`` (part A);
- part B and the merge are ``window_decode_merge``'s (base-2 LSE times ``ln 2``).

Pools: TensorRT-LLM's paged TRTLLM/FA4/XQA pools (NHD or HND views) are read in place. The
VANILLA arena is one page of ``max_ctx + B`` tokens a slot: there the "tail" is the whole context,
copied into the scratch pages each call, and that page size is none trtllm-gen takes (flashinfer
documents 16, 32 and 64 tokens); use the paged pool on SM100.
"""

from __future__ import annotations

import functools

import torch

from .base import MaskSpec, PagedKV
from .page_layout import page_layout
from .window_decode_merge import window_decode_merge

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


def scratch_page_count(page: int, block: int) -> int:
    """Scratch pages a sequence needs: ``ceil((P - 1 + B) / P)`` (context tail + block)."""
    return -(-(page - 1 + block) // page)


def write_scratch(cache: PagedKV, k_blk, v_blk) -> None:
    """Write each sequence's context tail and block keys into its scratch pages, in place.

    Scratch slot ``i``: context position ``(C // P) * P + i`` for ``i < C % P``, block key
    ``i - C % P`` while ``< B``, else unchanged (read back and rewritten)."""
    n, b = k_blk.shape[:2]
    p, r = cache.page_size, cache.ring_pages
    s = scratch_page_count(p, b)
    sp = cache.scratch_pages
    if sp is None or sp.shape[0] != n or sp.shape[1] < s:
        raise ValueError(f"trtllm_gen needs cache.scratch_pages [N={n}, >= {s}] (pages of the pool for the block's "
                         f"keys: ceil((page_size - 1 + B) / page_size)); got "
                         f"{None if sp is None else tuple(sp.shape)}")
    c = cache.ctx_lens.long()[:, None]
    i = torch.arange(s * p, device=k_blk.device)[None, :]
    tail = c % p
    from_ctx = i < tail
    j = i - tail
    from_blk = (j >= 0) & (j < b)
    src_page = cache.block_table.long().gather(1, (torch.div(c, p, rounding_mode="floor") % r)).expand(-1, s * p)
    src_slot = torch.where(from_ctx, i, 0).expand(n, -1)
    dst_page = sp.long()[:, :s].repeat_interleave(p, 1)
    dst_slot = (i % p).expand(n, -1)
    jj = j.clamp(0, b - 1).expand(n, -1)
    rows = torch.arange(n, device=k_blk.device)[:, None].expand(-1, s * p)
    for pages, blk in ((cache.k_pages, k_blk), (cache.v_pages, v_blk)):
        new = torch.where(from_ctx[..., None, None], pages[src_page, src_slot],
                          torch.where(from_blk[..., None, None], blk[rows, jj].to(pages.dtype), pages[dst_page, dst_slot]))
        pages[dst_page, dst_slot] = new


def decode_requests(q, cache: PagedKV, window_left: int):
    """One decode request per block query over the pool read in place plus the scratch pages
    (written by :func:`write_scratch`). Returns keyword arguments for the kernel (``query``,
    ``kv_cache``, ``kv_layout``, ``block_tables`` ``[N*B, R+S]`` int32, ``seq_lens`` ``[N*B]`` int32,
    ``max_seq_len`` the static ``(R + S) * P``)."""
    n, b, hq, d = q.shape
    p, r = cache.page_size, cache.ring_pages
    s = scratch_page_count(p, b)
    c = cache.ctx_lens.long()
    full = torch.div(c, p, rounding_mode="floor")
    oldest_page = torch.clamp(torch.div(c - 1, p, rounding_mode="floor") - (r - 1), min=0)
    first = torch.minimum(oldest_page, full)  # first complete page still stored
    count = (full - first)[:, None]
    idx = torch.arange(r + s, device=q.device)[None, :]
    ring = cache.block_table.long().gather(1, (first[:, None] + idx) % r)
    scratch = cache.scratch_pages.long()[:, :s].gather(1, (idx - count).clamp(0, s - 1))
    table = torch.where(idx < count, ring, torch.where(idx < count + s, scratch, 0))
    j = torch.arange(b, device=q.device)[None, :]
    seq_lens = count * p + (c % p)[:, None] + j + 1
    layout = page_layout(cache.k_pages)
    if layout is None or layout != page_layout(cache.v_pages):
        raise ValueError("trtllm_gen needs K and V pages in one layout: [pages, P, Hkv, D] runs (NHD) or a "
                         "transpose(1, 2) view of [pages, Hkv, P, D] runs (HND)")
    kv = (cache.k_pages, cache.v_pages) if layout == "nhd" else \
        (cache.k_pages.transpose(1, 2), cache.v_pages.transpose(1, 2))
    return dict(
        query=q.reshape(n * b, hq, d).to(cache.k_pages.dtype),
        kv_cache=kv,
        kv_layout=layout.upper(),
        block_tables=table.repeat_interleave(b, 0).to(torch.int32),
        seq_lens=seq_lens.reshape(-1).to(torch.int32),
        max_seq_len=(r + s) * p,
    )


def trtllm_gen_decode_provider(q, cache: PagedKV, k_blk, v_blk, window_left: int, scale: float, *, kernel=None):
    """Part A from trtllm-gen: returns ``out`` ``[N, B, Hq, D]`` and ``lse`` ``[N, B, Hq]``
    float32 in base 2. ``kernel`` defaults to :func:`flashinfer_decode` (tests pass an emulator).
    """
    n_seq, b, hq, d = q.shape
    write_scratch(cache, k_blk, v_blk)
    out, lse = (kernel or flashinfer_decode)(
        **decode_requests(q, cache, window_left),
        bmm1_scale=scale,
        bmm2_scale=1.0,
        window_left=window_left,
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


#: The emitted forward hands this lowering ``cache.scratch_pages`` (its own pages past the context).
trtllm_gen.needs_scratch_pages = True
