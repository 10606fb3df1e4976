"""Stand-in of ``tensorrt_llm._torch.speculative.dflash_attention``: the attention ops the DFlash
block decode calls, as dense float32 torch with the ops' mask semantics, counting every call
in ``ENGINE_ATTENTION_CALLS`` (so the suite can see whether TensorRT-LLM's own attention ran).

Reproduces (semantics only, amukkara/TensorRT-LLM @ d70a2287):
- ``get_dflash_flash_attention()``: flash-attn ``flash_attn_with_kvcache(q, k_cache, v_cache,
  cache_seqlens, cache_batch_idx, causal, window_size)``: query row ``i`` of a block of ``B`` sits
  at position ``seqlen - B + i``; key ``j < seqlen`` is allowed iff ``j <= pos`` when causal and
  ``pos - left <= j <= pos + right`` for finite bounds (``-1`` unbounded).
- ``get_dflash_trtllm_gen_ops()``: flashinfer trtllm-gen ``batch_decode_with_kv_cache`` (causal,
  ``window_left`` only) and ``batch_context_with_kv_cache(causal=False, window_left)``, which
  flashinfer rejects for a finite ``window_left`` (modeling_dflash.py
  ``validate_block_attention_windows`` docstring); the paged pool is replaced by dense tensors.
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


def get_dflash_flash_attention():
    def flash_attention(q, k_cache, v_cache, cache_seqlens, cache_batch_idx, causal, window_size):
        ENGINE_ATTENTION_CALLS.append(("VANILLA", bool(causal), tuple(window_size)))
        outs = []
        for bi in range(q.shape[0]):
            slot = int(cache_batch_idx[bi])
            outs.append(_attend(q[bi], k_cache[slot], v_cache[slot], int(cache_seqlens[bi]), causal, *window_size))
        return torch.stack(outs)

    return flash_attention


class _TrtllmGenOps:
    def decode(self, q, k, v, seqlen, window_left):
        ENGINE_ATTENTION_CALLS.append(("TRTLLM", True, (window_left, 0)))
        return _attend(q, k, v, seqlen, True, window_left, -1)

    def context(self, q, k, v, seqlen, window_left):
        ENGINE_ATTENTION_CALLS.append(("TRTLLM", False, (window_left, -1)))
        if window_left >= 0:
            raise RuntimeError("flashinfer trtllm-gen: causal=False with a finite window_left is not supported")
        return _attend(q, k, v, seqlen, False, -1, -1)


def get_dflash_trtllm_gen_ops():
    return _TrtllmGenOps()
