"""Stand-in of the draft KV cache manager the DFlash worker binds its paged context pool to
(``tensorrt_llm._torch.pyexecutor.resource_manager.KVCacheManager``, the V1 manager). Only torch.

Reproduces:

- NVIDIA/TensorRT-LLM, ``tensorrt_llm/_torch/pyexecutor/resource_manager.py`` @
  ``001541bad83b84ae4c5c4a279e464572d5f690f7``, ``KVCacheManager.get_buffers(layer_idx,
  kv_layout)``: the primary pool is page-major, ``[max_num_pages, num_layers, kv_factor,
  page_size * num_kv_heads * head_dim]``; one layer is the slice ``[:, layer]`` reshaped to
  ``[max_num_pages, kv_factor, num_kv_heads, page_size, head_dim]`` for ``kv_layout="HND"``
  (``[..., page_size, num_kv_heads, head_dim]`` for NHD): a strided view whose page stride
  spans every layer of the pool. ``kv_factor`` is 2 (1 for ``SELFKONLY``); ``layer_offsets``
  maps a layer id to its local index.
- amukkara/TensorRT-LLM, ``tensorrt_llm/_torch/speculative/dflash.py`` @
  ``d70a22876d5b0b13dcd5fee18e6dba2331c000a6``, ``DFlashWorker._init_ctx_block_tables`` /
  ``_refresh_ctx_block_tables`` (what they read of the manager): ``kv_cache_pool_mapping``
  (``[layer, 0]`` is the pool index), ``layer_offsets``, ``kv_factor``, ``max_blocks_per_seq``;
  the attention metadata's ``draft_kv_cache_block_offsets[pool, row, field, block]`` whose
  entries are ``pool_block_index * num_pool_layers * kv_factor + field`` (field 0 = K, 1 = V);
  an unallocated entry decodes to block 0 (the ``cpp`` backend maps ``BAD_PAGE_INDEX`` to 0).

Not reproduced: block reuse, eviction, the V2 manager (whose per-layer view has a one-layer page
stride over interleaved pages; ``_init_ctx_block_tables`` tells them apart by ``stride(0)``).
"""

import torch


class KVCacheManager:
    """A V1 draft KV cache manager: one page-major pool for ``num_layers`` layers."""

    def __init__(self, *, num_layers: int, num_kv_heads: int, head_dim: int, tokens_per_block: int,
                 max_num_pages: int, max_blocks_per_seq: int, dtype=torch.float32, fill=float("nan"),
                 generator=None):
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.tokens_per_block, self.max_blocks_per_seq = tokens_per_block, max_blocks_per_seq
        self.kv_factor = 2
        self.layer_offsets = {i: i for i in range(num_layers)}
        self.kv_cache_pool_mapping = torch.zeros(num_layers, 2, dtype=torch.int32)  # [layer, (pool, offset)]
        self.kv_cache_pool_mapping[:, 1] = torch.arange(num_layers)
        row = tokens_per_block * num_kv_heads * head_dim
        # Unwritten memory is NaN: a read of a page nobody wrote shows up in the logits.
        self._primary = torch.full((max_num_pages, num_layers, self.kv_factor, row), fill, dtype=dtype)
        self._free = list(torch.randperm(max_num_pages, generator=generator).tolist())
        self._blocks: dict = {}

    # -- NVIDIA resource_manager.py @ 001541ba, KVCacheManager.get_buffers ----------------------
    def get_buffers(self, layer_idx: int, kv_layout: str = "NHD") -> torch.Tensor:
        assert kv_layout in ("NHD", "HND"), f"Unsupported kv_layout: {kv_layout}"
        data = self._primary[:, self.layer_offsets[layer_idx]]  # get_primary_pool_data(layer_offset)
        h, p, d = self.num_kv_heads, self.tokens_per_block, self.head_dim
        shape = (data.shape[0], self.kv_factor, p, h, d) if kv_layout == "NHD" else (data.shape[0], self.kv_factor, h, p, d)
        return data.reshape(shape)

    # -- block allocation (one request's pages, in the order its tokens fill them) -------------
    def add_sequence(self, request_id: int, num_tokens: int) -> list:
        """Allocate the pages ``num_tokens`` tokens need (scattered over the pool)."""
        need = -(-num_tokens // self.tokens_per_block)
        if need > self.max_blocks_per_seq or need > len(self._free):
            raise RuntimeError(f"KV cache manager: {need} blocks for request {request_id} do not fit")
        self._blocks[request_id] = [self._free.pop() for _ in range(need)]
        return self._blocks[request_id]

    def draft_kv_cache_block_offsets(self, request_ids) -> torch.Tensor:
        """``attn_metadata.draft_kv_cache_block_offsets`` ``[pools=1, rows, kv_factor, max_blocks]``:
        ``block * num_pool_layers * kv_factor + field``; unallocated entries 0."""
        out = torch.zeros(1, len(request_ids), self.kv_factor, self.max_blocks_per_seq, dtype=torch.int32)
        for r, rid in enumerate(request_ids):
            for j, blk in enumerate(self._blocks.get(rid, [])):
                for f in range(self.kv_factor):
                    out[0, r, f, j] = blk * self.num_layers * self.kv_factor + f
        return out
