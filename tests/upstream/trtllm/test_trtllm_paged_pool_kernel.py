"""The lowerings over TensorRT-LLM's paged DFlash pool, built as TensorRT-LLM builds it (the
stand-in's ``private_ctx_arena`` / V1 ``KVCacheManager.get_buffers``, CONTRACT.md R11), through
``binding.paged_layer_cache`` -- the views the emitted ``dflash_forward`` hands each layer's
lowering -- against the float64 oracle (``tests/support/oracles.py``), with the oracle's context read by
TensorRT-LLM's own addressing (``layer_cache[page, 0 | 1, head, slot]``, page from the table).

CPU: the torch lowerings, the TMA row view, the block write. Interpreter (``test_interp_*``, a
child with ``TRITON_INTERPRET=1``): the Triton kernel, gathered and TMA tiles. GPU (``-m gpu``):
the SM90 Triton / Gluon kernel in bf16 on both pools at TensorRT-LLM's page sizes.
"""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from draftsmith.framework.emit.binding import paged_layer_cache, write_block
from draftsmith.lowering.base import MaskSpec, get_lowering
from draftsmith.lowering.page_layout import page_layout, tma_rows
from support.interp import interpreter_suite
from support.oracles import oracle
from support.poison import poison_torch_empty

STANDIN = Path(__file__).resolve().parent / "standin" / "tensorrt_llm" / "_torch"
HAS_CUDA = torch.cuda.is_available()
_child_results, interp_test = interpreter_suite(__file__)


def _load(rel: str, name: str):
    """A stand-in module by file (its imports are torch only), without a ``tensorrt_llm`` package."""
    spec = importlib.util.spec_from_file_location(name, STANDIN / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


WORKER = _load("speculative/dflash.py", "standin_dflash_worker")
MANAGER = _load("pyexecutor/resource_manager.py", "standin_resource_manager")


def build_pool(kind, layers, hkv, d, page, ctx, blk, dtype, gen, device="cpu", layer=1):
    """``(layer_cache, block_table [N, pages], ctx_lens)`` of one layer of a TensorRT-LLM pool on
    ``device`` holding random context for ``N = len(ctx)`` requests (``ctx[n]`` tokens, room for
    ``blk`` more), plus other requests' data (arena: every other slot random) or unwritten NaN
    pages (manager). The whole pool moves to the device before the layer view is taken (a
    strided view would be compacted by ``.to``)."""
    n = len(ctx)
    ctx_t = torch.tensor(ctx, dtype=torch.int32, device=device)
    if kind == "arena":  # slots 1..N (slot 0 another request, slot N+1 the scratch slot)
        cache, table = WORKER.private_ctx_arena(layers, n + 2, max(ctx) + blk, hkv, d, dtype=dtype, page_size=page)
        cache = torch.randn(cache.shape, generator=gen).to(dtype).to(device)
        return cache[layer], table[1:n + 1].to(device), ctx_t
    mgr = MANAGER.KVCacheManager(num_layers=layers, num_kv_heads=hkv, head_dim=d, tokens_per_block=page,
                                 max_num_pages=sum(-(-(c + blk) // page) for c in ctx) + 5,
                                 max_blocks_per_seq=max(-(-(c + blk) // page) for c in ctx) + 1, dtype=dtype,
                                 generator=gen)
    pool, divisor = WORKER.managed_ctx_pool(mgr, layers, hkv, d)
    assert divisor == 2 * layers  # a V1 view: page stride over every layer
    ids = list(range(n))
    for i, c in zip(ids, ctx):
        mgr.add_sequence(i, c + blk)
    table = WORKER.decode_block_tables(mgr.draft_kv_cache_block_offsets(ids), divisor)
    lc = pool[layer]
    for i, c in enumerate(ctx):  # the context: written by TensorRT-LLM's addressing
        t = torch.arange(c)
        pg = table[i].long()[t // page]
        lc[pg, 0, :, t % page] = torch.randn(c, hkv, d, generator=gen).to(dtype)
        lc[pg, 1, :, t % page] = torch.randn(c, hkv, d, generator=gen).to(dtype)
    mgr._primary = mgr._primary.to(device)
    lc = mgr.get_buffers(layer, kv_layout="HND")
    assert lc.stride(0) == layers * 2 * hkv * page * d
    return lc, table.to(device), ctx_t


def trtllm_tokens(layer_cache, table_row, start, end):
    """K, V ``[end - start, Hkv, D]`` of one request by TensorRT-LLM's addressing (HND block)."""
    page = layer_cache.shape[3]
    t = torch.arange(start, end, device=layer_cache.device)
    pg = table_row.long()[t // page]
    return layer_cache[pg, 0, :, t % page], layer_cache[pg, 1, :, t % page]


def make(kind, ctx, b, hq, hkv, d, page, dtype=torch.float32, seed=0, layers=3, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    lc, table, ctx_t = build_pool(kind, layers, hkv, d, page, ctx, b, dtype, gen, device)
    q, kb, vb = (torch.randn(len(ctx), b, h, d, generator=gen).to(dtype).to(device) for h in (hq, hkv, hkv))
    return lc, table, ctx_t, q, kb, vb


def check(lowering, kind, ctx, b, hq, hkv, d, page, causal, window, dtype=torch.float32, device="cpu", tol=1e-5,
          config=None, seed=0):
    lc, table, ctx_t, q, kb, vb = make(kind, ctx, b, hq, hkv, d, page, dtype, seed, device=device)
    storage = lc.untyped_storage().data_ptr()
    cache = paged_layer_cache(lc, table, ctx_t, hkv, d)
    assert cache.k_pages.untyped_storage().data_ptr() == storage == cache.v_pages.untyped_storage().data_ptr()
    assert page_layout(cache.k_pages) == "hnd" == page_layout(cache.v_pages)
    write_block(cache, kb, vb)  # the block at ctx + j, as TensorRT-LLM's append does
    for n, c in enumerate(ctx):
        k, v = trtllm_tokens(lc, table[n], c, c + b)
        assert torch.equal(k, kb[n]) and torch.equal(v, vb[n]), f"block of request {n} not at positions {c}.."
    scale = 1.0 / math.sqrt(d)
    mask = MaskSpec(causal=causal, window=window)
    fn = get_lowering(lowering).fn
    out = fn(q, cache, kb, vb, mask, scale) if config is None else fn(q, cache, kb, vb, mask, scale, config=config)
    starts = [0 if window is None else max(0, c - (window - 1)) for c in ctx]
    ks, vs = zip(*(trtllm_tokens(lc, table[n], s, c) for n, (s, c) in enumerate(zip(starts, ctx))))
    ref, _ = oracle(q, list(ks), list(vs), kb, vb, causal, window, scale, ctx_start=starts)
    assert torch.isfinite(out).all(), "read a NaN page (unwritten pool memory)"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < tol, f"{lowering} over the {kind} pool: relative error {err:.3g}"


@pytest.fixture(autouse=True)
def _poisoned_empty(monkeypatch):
    poison_torch_empty(monkeypatch)


POOLS = ["arena", "managed"]
MASKS = [(False, 8), (True, 8), (False, None), (True, None)]
CTX = [13, 0, 29, 8]  # several pages of 4 tokens, an empty context, one shorter than the window


@pytest.mark.parametrize("kind", POOLS)
@pytest.mark.parametrize("lowering", ["dense", "window_decode_merge"])
@pytest.mark.parametrize("causal,window", MASKS)
def test_torch_lowerings_over_the_pool(kind, lowering, causal, window):
    check(lowering, kind, CTX, 5, 4, 2, 16, 4, causal, window, seed=sum(map(ord, f"{kind}{lowering}{causal}{window}")))


@pytest.mark.parametrize("kind", POOLS)
def test_tma_rows_address_the_pool_in_place(kind):
    """The 2-D row view the TMA kernels read holds, for K and V, every (page, head, slot) of the
    pool where TensorRT-LLM put it; it starts at the pool's own memory."""
    lc, table, ctx, *_ = make(kind, CTX, 3, 4, 2, 16, 4)
    cache = paged_layer_cache(lc, table, ctx, 2, 16)
    for field, pages in ((0, cache.k_pages), (1, cache.v_pages)):
        rows, (tp, th, tc) = tma_rows(pages)
        assert rows.data_ptr() == lc[:, field].data_ptr()
        assert tp == lc.stride(0) // 16 and th == 4 and tc == 0
        for pg in table.flatten().tolist():
            for h in range(2):
                for slot in range(4):
                    assert torch.equal(rows[pg * tp + h * th + slot, :16].nan_to_num(7.0),
                                       lc[pg, field, h, slot].nan_to_num(7.0))


def test_malformed_layer_cache_refused_in_one_line():
    lc, table, ctx, *_ = make("arena", CTX, 3, 4, 2, 16, 4)
    with pytest.raises(ValueError, match=r"\[pages, 2, 2, page_size, 16\]") as e:
        paged_layer_cache(lc.transpose(2, 3), table, ctx, 2, 16)  # NHD block, not HND
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- interpreter


@pytest.mark.parametrize("kind,causal,window,tma", [("arena", False, 40, True), ("managed", True, None, True),
                                                    ("managed", False, 40, False), ("arena", True, None, False)])
@interp_test
def test_interp_triton_kernel_over_the_pool(kind, causal, window, tma):
    """The Triton kernel over both pools (page 16): gathered loads, and interior tiles through
    tensor descriptors over the strided HND rows (``tma``; refused before page_layout took a
    page stride larger than one page); split-KV on."""
    from draftsmith.lowering.triton_window_block import Config

    cfg = Config(block_m=32, block_n=16, num_splits=2, num_warps=4, num_stages=2, tma=tma)
    check("triton_window_block", kind, [70, 0, 33], 5, 4, 2, 64, 16, causal, window, config=cfg,
          seed=11 + 2 * tma + (kind == "arena"))


# ----------------------------------------------------------------------------- GPU

GPU_POOLS = [(k, p) for k in POOLS for p in (32, 64)]  # 32: TensorRT-LLM's arena page; 64: TMA tiles


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("kind,page", GPU_POOLS, ids=[f"{k}-p{p}" for k, p in GPU_POOLS])
@pytest.mark.parametrize("causal,window", [(False, 4096), (True, 4096), (False, None)])
def test_gpu_sm90_kernel_over_the_trtllm_pool(kind, page, causal, window):
    """MiniMax shape (Hq 64, Hkv 4, D 128, B 7, bf16) over TensorRT-LLM's pools on CUDA, the
    kernel the spec names for sm90 (``triton_window_block``) with its own tile choice; with
    64-token pages on an SM90 GPU the Gluon (TMA) kernel must be the one chosen."""
    from draftsmith.lowering import gluon_window_block
    from draftsmith.lowering.triton_window_block import tma_fits

    ctx = [9000, 4095, 100, 0]
    lc, table, ctx_t, q, kb, vb = make(kind, ctx, 7, 64, 4, 128, page, torch.bfloat16, seed=5, device="cuda")
    cache = paged_layer_cache(lc, table, ctx_t, 4, 128)
    if page >= 64:
        assert tma_fits(q, cache)
        if torch.cuda.get_device_capability()[0] == 9 and gluon_window_block.available():
            assert gluon_window_block.fits(q, cache, kb, vb)
    check("triton_window_block", kind, ctx, 7, 64, 4, 128, page, causal, window, dtype=torch.bfloat16,
          device="cuda", tol=1e-2, seed=5)
