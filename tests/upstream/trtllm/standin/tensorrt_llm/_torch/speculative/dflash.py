"""Stand-in of ``tensorrt_llm._torch.speculative.dflash`` (the worker's block-draft step)."""

import torch


def dflash_draft_slot_ids(num_gens, block_size, num_draft_tokens, shift_label, device="cpu"):
    """Reproduces amukkara/TensorRT-LLM, _torch/speculative/dflash.py @ d70a2287,
    ``dflash_draft_slot_ids``: per request, slots ``0..K-1`` under ``shift_label``, else ``1..K``."""
    bases = torch.arange(num_gens, device=device) * block_size
    first = 0 if shift_label else 1
    return (bases[:, None] + first + torch.arange(num_draft_tokens, device=device)[None, :]).flatten()


def markov_chain_logits(base_logits, first_prev, w1, w2):
    """The vanilla Markov refinement the worker applies (``apply_markov_chain_logits`` ->
    ``dspark_markov_chain_logits``): row ``j`` gets ``w2 @ w1[prev_j]``, ``prev_0`` the anchor,
    ``prev_j`` the argmax of refined row ``j-1``. Body NOT read in the stored source; semantics
    from drafter-reference.md section 1.5."""
    rows, prev = [], int(first_prev)
    for j in range(base_logits.shape[0]):
        r = base_logits[j] + w2.float() @ w1.float()[prev]
        rows.append(r)
        prev = int(r.argmax())
    return torch.stack(rows)


PAGED_ATTENTION_BACKENDS = ("TRTLLM", "FA4", "XQA")
ARENA_PAGE_SIZE = 32  # DFlashWorker._ctx_page_size: the private arena's page size


def private_ctx_arena(num_layers, num_slots, capacity, num_kv_heads, head_dim, dtype=torch.float32,
                      page_size=ARENA_PAGE_SIZE):
    """``(ctx_kv_cache, ctx_page_table)`` of the paged private arena, as amukkara/TensorRT-LLM
    @ d70a2287 ``DFlashWorker._lazy_init_ctx_buffers`` allocates it when no draft KV cache manager
    pool is bound (always under FA4): ``torch.zeros((L, total_pages, kv_factor 2, nkv, page_size,
    hd))`` (HND), ``pages_per_slot = ceil(capacity / page_size)`` with ``capacity = max_ctx +
    block``, ``total_pages = num_slots * pages_per_slot``, and the static page table
    ``arange(total_pages).view(num_slots, pages_per_slot)`` int32 (rows are slots)."""
    pages_per_slot = -(-capacity // page_size)
    total = num_slots * pages_per_slot
    cache = torch.zeros((num_layers, total, 2, num_kv_heads, page_size, head_dim), dtype=dtype)
    table = torch.arange(total, dtype=torch.int32).view(num_slots, pages_per_slot)
    return cache, table


def managed_ctx_pool(manager, num_layers, num_kv_heads, head_dim):
    """``(per-layer views, block divisor)``: ``DFlashWorker._managed_ctx_pool`` (``get_buffers(i,
    kv_layout="HND")`` for every layer; shape ``[pages, kv_factor, nkv, P, hd]`` checked) and
    ``_init_ctx_block_tables``' divisor from the view's page stride: ``kv_factor`` for a one-layer
    stride (V2), ``num_pool_layers * kv_factor`` for a stride over every layer (V1), else None
    (the worker then falls back to the private arena) (amukkara/TensorRT-LLM @ d70a2287)."""
    layers = [manager.get_buffers(i, kv_layout="HND") for i in range(num_layers)]
    p = layers[0].size(-2)
    for lay in layers:
        if tuple(lay.shape[1:]) != (2, num_kv_heads, p, head_dim):
            return None, None
    one = manager.kv_factor * num_kv_heads * p * head_dim
    stride0 = layers[0].stride(0)
    if stride0 == one:
        return layers, manager.kv_factor
    if stride0 == num_layers * one:
        return layers, num_layers * manager.kv_factor
    return None, None


def decode_block_tables(encoded, divisor):
    """``_refresh_ctx_block_tables``: field 0 of ``draft_kv_cache_block_offsets[pool, rows]``,
    negatives clamped to 0, floor-divided by the divisor: ``[rows, max_blocks]`` int32."""
    return (encoded[0, :, 0].to(torch.int64).clamp(min=0) // divisor).to(torch.int32)


def store_context_kv_paged(k, v, rows, positions, ctx_kv_cache, page_table, append):
    """``_store_context_kv_paged``: per layer, ``append_paged_kv_cache`` of ``k``/``v``
    ``[N, L, nkv, hd]`` at ``positions`` of table ``rows`` (kv_indices = the flattened table,
    kv_indptr = its row starts), HND."""
    width = page_table.shape[1]
    indices = page_table.flatten().contiguous()
    indptr = torch.arange(0, (page_table.shape[0] + 1) * width, width, dtype=torch.int32)
    last = torch.full((page_table.shape[0],), ctx_kv_cache[0].size(-2), dtype=torch.int32)
    for li in range(k.shape[1]):
        append(k[:, li].contiguous(), v[:, li].contiguous(), rows.to(torch.int32), positions.to(torch.int32),
               ctx_kv_cache[li], indices, indptr, last, kv_layout="HND")


class DFlashWorker:
    """Reproduces the draft step of ``DFlashWorker`` / ``DSparkWorker`` (same file @ d70a2287):
    ``_draft_block_width`` (K+1, d70a2287 ``DFlashWorker``; K under DSpark's ``shift_label``: NVIDIA
    ``_torch/speculative/dspark.py`` ``DSparkWorker._draft_block_width``, source id 57387223478), the trained-width check and
    ``validate_block_attention_windows()`` under TRTLLM (``_lazy_init_ctx_buffers``), the context
    K/V stored by ``precompute_context_kv`` into the pool the backend uses, one ``dflash_forward``
    over the block ``[anchor, mask, ...]``, rows picked by ``dflash_draft_slot_ids``, ``lm_head``,
    Markov refinement when the drafter has the head, greedy argmax. One drafted request.

    Pools (``_lazy_init_ctx_buffers``): VANILLA, the dense ``[slots, L, capacity, nkv, hd]`` K and V
    tensors, the request in slot 1 of 3 (``max_batch = 2`` plus the scratch slot); TRTLLM and XQA
    with ``draft_kv_cache_manager`` (``pool="managed"``), the manager's per-layer views and the
    per-iteration block table decoded from ``draft_kv_cache_block_offsets``, rows = batch positions
    (the drafted request is generation row 1 after one context request); otherwise, and always
    under FA4 (``pool="arena"``), the paged private arena with the static per-slot page table.
    Every other slot, page or row holds another request's data (random) or unwritten memory (NaN
    in the manager's pool), so reading the wrong one changes the draft."""

    def __init__(self, spec_config, mode_is_dspark: bool, draft_kv_cache_manager=None, pool: str = "managed",
                 mapping=None):
        self.spec_config, self.is_dspark = spec_config, mode_is_dspark
        self.max_draft_len = spec_config.max_draft_len
        self.manager, self.pool = draft_kv_cache_manager, pool
        self.mapping = mapping
        self.layout: dict = {}
        self.dflash2: dict = {}  # like ``layout``, a record for the suite: the lm_head logits the selector read

    def _draft_block_width(self, dm):
        if self.is_dspark and getattr(dm, "_dspark_shift_label", False):
            return self.max_draft_len
        return self.max_draft_len + 1

    def prepare(self, dm):
        if dm.dflash_attention_backend == "TRTLLM":
            dm.validate_block_attention_windows()
        self.width = self._draft_block_width(dm)
        trained = getattr(dm, "block_size", None) or self.max_draft_len + 1
        if self.width > trained:
            raise ValueError(f"DFlash checkpoint was trained with block_size={trained}. Lower max_draft_len.")

    def draft(self, dm, target_hidden, anchor: int):
        """target_hidden [C, n*h] at positions 0..C-1. Returns (tokens [K], logits [K, V], slots)."""
        c = target_hidden.shape[0]
        w, K = self.width, self.max_draft_len
        mask_id = self.spec_config.mask_token_id if self.spec_config.mask_token_id is not None else dm.mask_token_id
        proj = dm.project_target_hidden(target_hidden)
        k, v = dm.precompute_context_kv(proj, torch.arange(c))
        L, nkv, hd = k.shape[1], k.shape[2], k.shape[3]
        g = torch.Generator().manual_seed(4242)
        ids = torch.tensor([anchor] + [int(mask_id)] * (w - 1))
        emb = dm.draft_model_full.model.embed_tokens(ids)[None]
        qpos = torch.arange(c, c + w)[None]
        backend = dm.dflash_attention_backend
        if backend not in PAGED_ATTENTION_BACKENDS:
            kc = torch.randn(3, L, c + w, nkv, hd, generator=g)  # slots 0, 2: other requests / scratch
            vc = torch.randn(3, L, c + w, nkv, hd, generator=g)
            kc[1, :, :c], vc[1, :, :c] = k.transpose(0, 1), v.transpose(0, 1)
            self.layout = {"pool": "dense", "shape": list(kc.shape)}
            out = dm.dflash_forward(emb, qpos, torch.tensor([c]), kc, vc, torch.tensor([1]))
        else:
            out = self._draft_paged(dm, emb, qpos, k, v, c, w, g)
        slots = dflash_draft_slot_ids(1, w, K, self.is_dspark and getattr(dm, "_dspark_shift_label", False))
        gen_hidden = out[slots]
        logits = dm.lm_head(gen_hidden)
        if getattr(dm, "has_markov_head", False):
            logits = markov_chain_logits(logits, anchor, dm.markov_w1, dm.markov_w2)
        if getattr(dm, "has_candidate_selector", False):
            draft_logits = logits.clone()
            logits = self._apply_dflash2_selector(dm, logits.reshape(1, K, -1), gen_hidden.reshape(1, K, -1),
                                                  torch.tensor([anchor]), None)[0]
            self.dflash2 = {"draft_logits": draft_logits}
        return logits.argmax(-1), logits, slots

    def _apply_dflash2_selector(self, draft_model, gen_logits, block_hidden_states, anchor_tokens, spec_metadata):
        """Reproduces ``DFlashWorker._apply_dflash2_selector`` (same file @ d70a2287): the global
        top-k candidates, then ``draft_model.select_candidate_path`` (the full-vocab rows: ``-inf``
        but at the candidates, which carry the walk's realized rows)."""
        selector = draft_model.candidate_selector
        candidate_ids, unary_logits, block_logits = self._dflash2_global_top_k(
            gen_logits, spec_metadata, top_k=selector.top_k, full_vocab=selector.predecessor_codebook.shape[0])
        return draft_model.select_candidate_path(block_logits, candidate_ids, unary_logits, block_hidden_states,
                                                 anchor_tokens.long())

    def _draft_logits_are_sharded(self, logits, spec_metadata):
        """Reproduces NVIDIA/TensorRT-LLM ``_torch/speculative/interface.py`` (index id 57352998664, commit
        not shown) ``SpecWorkerBase._draft_logits_are_sharded`` only as far as its one caller here
        needs: ``tp_size > 1`` (its other half, logits narrower than the draft head's vocab, follows from
        the caller's ``shard * tp_size == full_vocab``; its body was not read past its docstring;
        attention DP's LM-head TP not reproduced)."""
        return self.mapping is not None and self.mapping.tp_size > 1

    def _dflash2_global_top_k(self, gen_logits, spec_metadata, top_k, full_vocab):
        """Reproduces ``DFlashWorker._dflash2_global_top_k`` (same file @ d70a2287): full-vocab logits
        -> ``torch.topk`` (``block_logits`` is ``gen_logits`` itself); a TP column shard -> each rank's
        local top-k ``(id + tp_rank * shard, value)`` interleaved as floats, all-gathered on the last
        dim, the global top-k of the values and their ids, and a fresh ``-inf`` full-vocab tensor."""
        shard = gen_logits.shape[-1]
        if shard == full_vocab:
            unary_logits, candidate_ids = torch.topk(gen_logits, top_k, dim=-1)
            return candidate_ids, unary_logits, gen_logits
        mapping = self.mapping
        if not (self._draft_logits_are_sharded(gen_logits, spec_metadata) and mapping is not None
                and shard * mapping.tp_size == full_vocab):
            raise NotImplementedError(f"DFlash 2 candidate selection needs the drafter's full vocab ({full_vocab}) "
                                      f"or a plain TP column shard of it; got draft logits of width {shard}.")
        from ..distributed import allgather

        local_values, local_ids = torch.topk(gen_logits, top_k, dim=-1)
        local_ids = local_ids + mapping.tp_rank * shard
        combined = torch.stack([local_ids.float(), local_values.float()], dim=-1).flatten(-2)
        gathered = allgather(combined, mapping, dim=-1)
        unary_logits, selected = torch.topk(gathered[..., 1::2], top_k, dim=-1)
        candidate_ids = gathered[..., 0::2].gather(-1, selected).long()
        block_logits = gen_logits.new_full((*gen_logits.shape[:-1], full_vocab), float("-inf"))
        return candidate_ids, unary_logits, block_logits

    def _draft_paged(self, dm, emb, qpos, k, v, c, w, g):
        from .dflash_attention import append_paged_kv_cache

        L, nkv, hd = k.shape[1], k.shape[2], k.shape[3]
        backend = dm.dflash_attention_backend
        pool, divisor = (None, None)
        if backend != "FA4" and self.pool == "managed" and self.manager is not None:
            pool, divisor = managed_ctx_pool(self.manager, L, nkv, hd)
        if pool is not None:
            # Batch: row 0 a context request (another prompt), row 1 the drafted request.
            self.manager.add_sequence(100, 2 * self.manager.tokens_per_block + 3)
            self.manager.add_sequence(101, c + w)
            table = decode_block_tables(self.manager.draft_kv_cache_block_offsets([100, 101]), divisor)
            other = torch.arange(2 * self.manager.tokens_per_block + 3)
            store_context_kv_paged(torch.randn(len(other), L, nkv, hd, generator=g),
                                   torch.randn(len(other), L, nkv, hd, generator=g),
                                   torch.zeros(len(other), dtype=torch.long), other, pool, table, append_paged_kv_cache)
            row, cache = 1, pool
            self.layout = {"pool": "managed", "divisor": divisor, "page_size": pool[0].size(-2),
                           "layer_stride0": pool[0].stride(0), "table": table.tolist()}
        else:
            cache, table = private_ctx_arena(L, 3, c + w, nkv, hd)
            cache.copy_(torch.randn(cache.shape, generator=g))  # slots 0 and 2: other requests' data
            row = 1
            self.layout = {"pool": "arena", "shape": list(cache.shape), "table": table.tolist()}
        store_context_kv_paged(k, v, torch.full((c,), row, dtype=torch.long), torch.arange(c), cache, table,
                               append_paged_kv_cache)
        return dm.dflash_forward(emb, qpos, torch.tensor([c]), None, None, torch.tensor([row]),
                                 ctx_kv_cache=cache, ctx_page_table=table)
