"""The block decode of an emitted drafter, per tensor-parallel rank.

What TensorRT-LLM's ``DFlashForCausalLM.dflash_forward`` computes for one draft step (amukkara
/TensorRT-LLM @ d70a2287, generic branch), with each layer's attention through its draftsmith
lowering. It uses only what the pinned class and the generated backbone define: the backbone's
``model.layers[i].{input_layernorm, self_attn.{qkv_proj, o_proj, q_norm, k_norm (when present, as its
``_has_qk_norm`` tests them), num_heads,
num_key_value_heads, head_dim, q_size, kv_size}, post_attention_layernorm, mlp}`` and
``model.norm``; RoPE is computed here from the compiled drafter (NeoX halves over the first
``rotary_dim`` dims, base ``rope.theta``), not through any method of the wrapper.

DFlash 2 (``dflash2``): each sublayer is wrapped in the block convolutions TensorRT-LLM's own
``load_weights`` built from the checkpoint (``_load_dflash2_weights``: ``attention_convs[i]``,
``mlp_convs[i]``, ``DFlash2BlockConv``), called where ``dflash_forward`` calls them: ``prepare`` on
the normed sublayer input (q, block k and v come from its output), ``finish`` on ``o_proj``'s /
the MLP's output before the residual is added. The convolutions are unsharded (every rank holds
the whole hidden row after the ROW all-reduce). The block (noise) embeddings are first multiplied by
the record's ``input_embedding_scale`` (docs/dflash2-reference.md section 3, as the host's
``embed_block``; in their dtype; skipped at 1). The candidate selector is not here: TensorRT-LLM's
worker runs it after ``lm_head`` (``_apply_dflash2_selector``) on this forward's rows, through the
emitted class's ``select_candidate_path`` (:mod:`.runtime`: the record's unary transform first).

Per rank: heads and KV heads are the rank's (``num_heads_per_rank = attn0.num_heads``), the
context pool is the rank's, and ``o_proj`` / ``down_proj`` all-reduce inside (ROW Linears).

CUDA graphs: every buffer (cos/sin table, the position arange, slot / length / page-table
staging, the lowering list) is built on the first call and reused; later calls allocate no
buffer of their own (the GEMMs and lowerings still produce their outputs; a lowering that needs
scratch pages, ``trtllm_gen``, gets a small index tensor a layer), read no host value
and index only by device tensors. Rows past ``b`` (TensorRT-LLM's padded rows, mapped to its
scratch slot) are computed like any other.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from ...lowering.base import MaskSpec, PagedKV


class BlockDecode:
    """One drafter's block decode with its buffers (one instance per drafter module)."""

    def __init__(self, adapter: str, masks: Sequence[MaskSpec], fns: Sequence[Any], rotary_dim: int,
                 theta: float, max_positions: int, dflash2: bool = False, input_embedding_scale: float = 1.0):
        self.adapter, self.masks, self.fns = adapter, tuple(masks), tuple(fns)
        self.dflash2 = bool(dflash2)
        self.input_embedding_scale = float(input_embedding_scale)  # DFlash 2's block-embedding scale (1: none)
        self.rotary_dim, self.theta, self.max_positions = rotary_dim, float(theta), int(max_positions)
        self.buffers: Optional[dict] = None
        self._tables: dict = {}  # device -> (cos, sin), built once
        self._retired: list = []  # staging buffers a captured graph may still read: kept alive

    # -- buffers --------------------------------------------------------------------------
    def _rope_tables(self, device):
        key = str(device)
        if key not in self._tables:
            half = self.rotary_dim // 2
            inv = 1.0 / (self.theta ** (torch.arange(0, half, dtype=torch.float64, device=device) * 2
                                        / self.rotary_dim))
            freqs = torch.outer(torch.arange(self.max_positions, dtype=torch.float64, device=device), inv)
            self._tables[key] = (freqs.cos().float(), freqs.sin().float())
        return self._tables[key]

    def _build(self, device, rows: int, blk: int, pages_per_seq: int) -> dict:
        cos, sin = self._rope_tables(device)
        return dict(
            device=device, rows=rows, blk=blk, pages=pages_per_seq, cos=cos, sin=sin,
            arange=torch.arange(blk, dtype=torch.long, device=device),
            slots=torch.zeros(rows, 1, dtype=torch.int32, device=device),
            ctx=torch.zeros(rows, dtype=torch.int32, device=device),
            table=torch.zeros(rows, pages_per_seq, dtype=torch.int32, device=device),
        )

    def buffers_for(self, device, rows: int, blk: int, pages_per_seq: int) -> dict:
        """The buffers, built on the first call; a later call that needs more rows, another block
        width, another page-table width or another device gets new staging buffers (the RoPE table stays) and
        the old ones are kept alive for any graph captured with them."""
        b = self.buffers
        if b is None or b["device"] != device or b["rows"] < rows or b["blk"] != blk or b["pages"] != pages_per_seq:
            if b is not None:
                self._retired.append(b)
            self.buffers = b = self._build(device, rows, blk, pages_per_seq)
        return b

    # -- math -----------------------------------------------------------------------------
    def rope(self, x: torch.Tensor, pos: torch.Tensor, buf: dict) -> torch.Tensor:
        """NeoX RoPE of ``x [b, blk, h, hd]`` over its first ``rotary_dim`` dims at ``pos [b, blk]``."""
        half = self.rotary_dim // 2
        cos = buf["cos"][pos][:, :, None, :]
        sin = buf["sin"][pos][:, :, None, :]
        xf = x.float()
        x1, x2 = xf[..., :half], xf[..., half:self.rotary_dim]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, xf[..., self.rotary_dim:]], dim=-1)
        return out.to(x.dtype)

    def __call__(self, model, noise_embedding, query_positions, num_ctx_per_req, ctx_k_cache, ctx_v_cache,
                 ctx_cache_batch_idx, ctx_kv_cache=None, ctx_page_table=None):
        """``[b * block, hidden]`` after the final norm (see the module docstring)."""
        paged = ctx_kv_cache is not None or ctx_page_table is not None
        if paged and (ctx_kv_cache is None or ctx_page_table is None):
            raise ValueError(f"{self.adapter}: a paged context cache needs both ctx_kv_cache and ctx_page_table")
        layers = model.model.layers
        convs = self.dflash2
        if convs and not getattr(model, "has_block_conv", False):
            raise ValueError(f"{self.adapter}: a DFlash 2 drafter, but TensorRT-LLM built no block convolutions (its "
                             "load_weights builds them when the converted config carries dflash_config.conv_kernel_size "
                             "and the checkpoint the layers.<i>.attention_conv / mlp_conv tensors)")
        a0 = layers[0].self_attn
        q_size, kv_size, hd = a0.q_size, a0.kv_size, a0.head_dim
        nh, nkv = a0.num_heads, a0.num_key_value_heads  # per rank
        qk_norm = hasattr(a0, "q_norm") and hasattr(a0, "k_norm")  # DFlashForCausalLM's _has_qk_norm rule
        b, blk = noise_embedding.shape[:2]
        device = noise_embedding.device
        buf = self.buffers_for(device, b, blk, ctx_page_table.shape[1] if paged else 1)
        ctx = buf["ctx"][:b]
        ctx.copy_(num_ctx_per_req[:b])
        if paged:
            table = buf["table"][:b]  # contiguous rows of the table's width
            rows = ctx_cache_batch_idx[:b].long()
            if ctx_page_table.dtype == torch.int32:
                torch.index_select(ctx_page_table, 0, rows, out=table)
            else:
                table.copy_(ctx_page_table.index_select(0, rows))
        else:
            table = buf["slots"][:b]
            table.copy_(ctx_cache_batch_idx[:b].view(-1, 1))
        pos = query_positions.reshape(b, blk).long()
        scale = hd ** -0.5
        hidden, residual = noise_embedding.reshape(b * blk, -1), None
        if self.input_embedding_scale != 1.0:
            hidden = hidden * self.input_embedding_scale
        for li, layer in enumerate(layers):
            attn = layer.self_attn
            if residual is None:
                residual = hidden
                normed = layer.input_layernorm(hidden)
            else:
                normed, residual = layer.input_layernorm(hidden, residual)
            if convs:
                normed, attn_coeff = model.attention_convs[li].prepare(normed, blk)
            qkv = attn.qkv_proj(normed)
            q, k, v = qkv[..., :q_size], qkv[..., q_size:q_size + kv_size], qkv[..., q_size + kv_size:]
            q, k = q.reshape(b, blk, nh, hd), k.reshape(b, blk, nkv, hd)
            if qk_norm:
                q = attn.q_norm(q.reshape(-1, hd)).reshape(b, blk, nh, hd)
                k = attn.k_norm(k.reshape(-1, hd)).reshape(b, blk, nkv, hd)
            q, k = self.rope(q, pos, buf), self.rope(k, pos, buf)
            v = v.reshape(b, blk, nkv, hd)
            if paged:
                cache = paged_layer_cache(ctx_kv_cache[li], table, ctx, nkv, hd)
            else:
                cache = PagedKV(ctx_k_cache[:, li], ctx_v_cache[:, li], table, ctx)
            write_block(cache, k, v, buf["arange"])
            if getattr(self.fns[li], "needs_scratch_pages", False):
                cache.scratch_pages = pages_after_context(cache, blk)
            kp, vp = cache.k_pages, cache.v_pages
            out = self.fns[li](q.to(kp.dtype), cache, k.to(kp.dtype), v.to(vp.dtype), self.masks[li], scale)
            h = attn.o_proj(out.reshape(b * blk, q_size))
            if convs:
                h = model.attention_convs[li].finish(h, attn_coeff, blk)
            h, residual = layer.post_attention_layernorm(h, residual)
            if convs:
                h, mlp_coeff = model.mlp_convs[li].prepare(h, blk)
            hidden = layer.mlp(h)
            if convs:
                hidden = model.mlp_convs[li].finish(hidden, mlp_coeff, blk)
        out, _ = model.model.norm(hidden, residual)
        return out


def paged_layer_cache(layer_cache: torch.Tensor, block_table: torch.Tensor, ctx_lens: torch.Tensor,
                      kv_heads: int, head_dim: int) -> PagedKV:
    """One layer of TensorRT-LLM's paged DFlash pool (``[pages, 2, nkv, P, hd]``, HND; K ``[:, 0]``,
    V ``[:, 1]``) as a :class:`PagedKV`, in place (views, no copy)."""
    if layer_cache.dim() != 5 or layer_cache.shape[1] != 2 or layer_cache.shape[2] != kv_heads \
            or layer_cache.shape[4] != head_dim or layer_cache.stride(-1) != 1:
        raise ValueError(f"ctx_kv_cache layer must be [pages, 2, {kv_heads}, page_size, {head_dim}] (HND, K and V per "
                         f"block) with a contiguous last dim; got {tuple(layer_cache.shape)} strides "
                         f"{tuple(layer_cache.stride())}")
    return PagedKV(layer_cache[:, 0].transpose(1, 2), layer_cache[:, 1].transpose(1, 2), block_table, ctx_lens)


def pages_after_context(cache: PagedKV, blk: int) -> torch.Tensor:
    """``[N, S]``: each sequence's own pages from the one holding position ``C_n`` on
    (``S = ceil((P - 1 + B) / P)``), which :func:`write_block` has just filled with the context tail
    and the block: the scratch pages a lowering that writes the block into the pool
    (``needs_scratch_pages``, e.g. ``trtllm_gen``) rewrites with the same values."""
    p, ring = cache.page_size, cache.ring_pages
    s = -(-(p - 1 + blk) // p)
    logical = torch.div(cache.ctx_lens.long(), p, rounding_mode="floor")[:, None] + torch.arange(
        s, device=cache.block_table.device)[None, :]
    return cache.block_table.gather(1, logical % ring)


def write_block(cache: PagedKV, k: torch.Tensor, v: torch.Tensor, arange: torch.Tensor) -> None:
    """Write the block's K/V ``[N, B, nkv, hd]`` at positions ``ctx_lens[n] + j`` into the cache's
    pages, in place (``arange``: ``0..B-1``, a reused buffer)."""
    pos = cache.ctx_lens.long()[:, None] + arange[None, :]
    page_size, ring = cache.page_size, cache.ring_pages
    pages = cache.block_table.long().gather(1, (pos // page_size) % ring)
    slots = pos % page_size
    cache.k_pages[pages, slots] = k.to(cache.k_pages.dtype)
    cache.v_pages[pages, slots] = v.to(cache.v_pages.dtype)
