"""Stand-in of ``tensorrt_llm._torch.speculative.dflash_attention``: the attention ops the DFlash
block decode calls, as float32 torch with the ops' mask and addressing semantics, counting every
attention call in ``ENGINE_ATTENTION_CALLS`` (so the suite can see whether TensorRT-LLM's own
attention ran). No device checks (the real loaders refuse TRTLLM off SM100/SM103 and FA4 off SM90).

Reproduces (amukkara/TensorRT-LLM @ d70a22876d5b0b13dcd5fee18e6dba2331c000a6, this module and
``modeling_dflash.py`` ``dflash_forward``, which call them):

- ``get_dflash_flash_attention()``: flash-attn ``flash_attn_with_kvcache(q, k_cache, v_cache,
  cache_seqlens, cache_batch_idx, causal, window_size)`` over the dense pool: query row ``i`` of a
  block of ``B`` sits at position ``seqlen - B + i``; key ``j < seqlen`` is allowed iff ``j <= pos``
  when causal and ``pos - left <= j <= pos + right`` for finite bounds (``-1`` unbounded).
- ``get_dflash_paged_append()``: flashinfer ``page.append_paged_kv_cache(append_key, append_value,
  batch_indices, positions, paged_kv_cache, kv_indices, kv_indptr, kv_last_page_len, kv_layout)``
  (docs.flashinfer.ai, ``flashinfer.page.append_paged_kv_cache``): row ``i`` goes to page
  ``kv_indices[kv_indptr[batch_indices[i]] + positions[i] // P]``, slot ``positions[i] % P``;
  a single 5-D HND cache is ``[pages, 2, Hkv, P, D]`` with K at ``[:, 0]``, V at ``[:, 1]``.
- ``get_dflash_trtllm_gen_ops()``: ``append_paged_kv_cache`` (as above),
  ``batch_decode_with_kv_cache`` (causal, ``window_left``, ``q_len_per_req`` queries ending at
  ``seq_lens``) and ``batch_context_with_kv_cache(causal=False, window_left)``, which flashinfer
  rejects for a finite ``window_left`` (modeling_dflash.py ``validate_block_attention_windows``
  docstring), over ``kv_cache=(K [pages, Hkv, P, D], V)`` and ``block_tables`` (HND).
- ``get_dflash_fa4_fwd()``: FlashAttention-4 ``_flash_attn_fwd(q [B, blk, Hq, D], k_pages, v_pages
  [pages, P, Hkv, D], seqused_k, page_table, softmax_scale, causal, window_size_left,
  window_size_right, ...)`` -> ``(out, ...)``: flash-attn's mask, two-sided windows.
- ``get_dflash_xqa_decode()``: flashinfer XQA decode with ``window_left`` and a per-row draft mask
  (causal prefix or the whole block); the right window bound is dropped.
"""

import math

import torch

ENGINE_ATTENTION_CALLS: list = []


def _attend(q, k, v, seqlen, causal, left, right):
    """q [B, Hq, D] at positions seqlen-B.., k/v [S, Hkv, D]; returns [B, Hq, D]."""
    b, hq, d = q.shape
    hkv = k.shape[1]
    k, v = k[:seqlen].float(), v[:seqlen].float()
    pos = torch.arange(seqlen - b, seqlen)[:, None]
    kp = torch.arange(seqlen)[None, :]
    ok = torch.ones(b, seqlen, dtype=torch.bool)
    if causal:
        ok &= kp <= pos
    if left >= 0:
        ok &= kp >= pos - left
    if right >= 0:
        ok &= kp <= pos + right
    rep = hq // hkv
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = torch.einsum("bhd,shd->hbs", q.float(), kk) / math.sqrt(d)
    s = s.masked_fill(~ok[None], float("-inf"))
    return torch.einsum("hbs,shd->bhd", torch.softmax(s, -1), vv)


def _gather_hnd(k_cache, v_cache, table_row, seqlen):
    """Tokens ``0..seqlen-1`` of one request from HND pages ``[pages, Hkv, P, D]``: ``[S, Hkv, D]``."""
    p = k_cache.shape[2]
    t = torch.arange(seqlen)
    pages = table_row.long()[t // p]
    return k_cache[pages, :, t % p], v_cache[pages, :, t % p]


def get_dflash_flash_attention():
    def flash_attention(q, k_cache, v_cache, cache_seqlens, cache_batch_idx, causal, window_size):
        ENGINE_ATTENTION_CALLS.append(("VANILLA", bool(causal), tuple(window_size)))
        outs = []
        for bi in range(q.shape[0]):
            slot = int(cache_batch_idx[bi])
            outs.append(_attend(q[bi], k_cache[slot], v_cache[slot], int(cache_seqlens[bi]), causal, *window_size))
        return torch.stack(outs)

    return flash_attention


def append_paged_kv_cache(append_key, append_value, batch_indices, positions, paged_kv_cache, kv_indices,
                          kv_indptr, kv_last_page_len, kv_layout="NHD"):
    """flashinfer's paged append (see the module docstring); HND single-tensor or (K, V) caches."""
    if kv_layout != "HND":
        raise NotImplementedError("stand-in: HND paged append only (the DFlash pools are HND)")
    k_cache, v_cache = (paged_kv_cache[:, 0], paged_kv_cache[:, 1]) if torch.is_tensor(paged_kv_cache) \
        else paged_kv_cache
    p = k_cache.shape[2]
    pos = positions.long()
    pages = kv_indices.long()[kv_indptr.long()[batch_indices.long()] + pos // p]
    k_cache[pages, :, pos % p] = append_key.to(k_cache.dtype)
    v_cache[pages, :, pos % p] = append_value.to(v_cache.dtype)


def get_dflash_paged_append():
    return append_paged_kv_cache


class _TrtllmGenOps:
    append_paged_kv_cache = staticmethod(append_paged_kv_cache)

    @staticmethod
    def batch_decode_with_kv_cache(*, query, kv_cache, block_tables, seq_lens, window_left, out, q_len_per_req,
                                   kv_layout="HND", **_):
        ENGINE_ATTENTION_CALLS.append(("TRTLLM", True, (window_left, 0)))
        assert kv_layout == "HND"
        k, v = kv_cache
        for bi in range(block_tables.shape[0]):
            s = int(seq_lens[bi])
            kk, vv = _gather_hnd(k, v, block_tables[bi], s)
            rows = slice(bi * q_len_per_req, (bi + 1) * q_len_per_req)
            out[rows] = _attend(query[rows], kk, vv, s, True, window_left, -1).to(out.dtype)

    @staticmethod
    def batch_context_with_kv_cache(*, query, kv_cache, block_tables, seq_lens, window_left, out, cum_seq_lens_q,
                                    causal=False, kv_layout="HND", **_):
        ENGINE_ATTENTION_CALLS.append(("TRTLLM", bool(causal), (window_left, -1)))
        if not causal and window_left >= 0:
            raise RuntimeError("flashinfer trtllm-gen: causal=False with a finite window_left is not supported")
        assert kv_layout == "HND"
        k, v = kv_cache
        for bi in range(block_tables.shape[0]):
            s = int(seq_lens[bi])
            kk, vv = _gather_hnd(k, v, block_tables[bi], s)
            rows = slice(int(cum_seq_lens_q[bi]), int(cum_seq_lens_q[bi + 1]))
            out[rows] = _attend(query[rows], kk, vv, s, bool(causal), window_left, -1).to(out.dtype)


def get_dflash_trtllm_gen_ops():
    return _TrtllmGenOps()


def get_dflash_fa4_fwd():
    def fa4_fwd(q, k_pages, v_pages, *, seqused_k, page_table, softmax_scale, causal, window_size_left,
                window_size_right, **_):
        ENGINE_ATTENTION_CALLS.append(("FA4", bool(causal), (window_size_left, window_size_right)))
        left = -1 if window_size_left is None else window_size_left
        right = -1 if window_size_right is None else window_size_right
        k_hnd, v_hnd = k_pages.transpose(1, 2), v_pages.transpose(1, 2)
        out = torch.empty(q.shape, dtype=q.dtype)
        for bi in range(q.shape[0]):
            s = int(seqused_k[bi])
            kk, vv = _gather_hnd(k_hnd, v_hnd, page_table[bi], s)
            out[bi] = _attend(q[bi], kk, vv, s, bool(causal), left, right).to(q.dtype)
        return out, None

    return fa4_fwd


def get_dflash_xqa_decode():
    def xqa_decode(*, query, kv_cache, block_tables, seq_lens, window_left, q_len_per_req, mask, kv_layout="HND",
                   **_):
        # mask rows: row i reads draft columns 0..i (causal) or the whole block; decode from bits.
        causal = bool(mask.numel()) and int(mask[0, 0, 0]) == 1 and q_len_per_req > 1
        ENGINE_ATTENTION_CALLS.append(("XQA", causal, (window_left, -1)))
        assert kv_layout == "HND"
        k, v = kv_cache
        out = torch.empty(query.shape, dtype=query.dtype)
        for bi in range(block_tables.shape[0]):
            s = int(seq_lens[bi])
            kk, vv = _gather_hnd(k, v, block_tables[bi], s)
            rows = slice(bi * q_len_per_req, (bi + 1) * q_len_per_req)
            out[rows] = _attend(query[rows], kk, vv, s, causal, window_left, -1).to(query.dtype)
        return out

    return xqa_decode
