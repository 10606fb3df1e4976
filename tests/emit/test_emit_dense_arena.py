"""Every lowering reads TensorRT-LLM's VANILLA dense arena in place: one page of any length a slot.

Under ``attention_backend: VANILLA`` TensorRT-LLM hands the draft forward the arena
``ctx_k_cache`` / ``ctx_v_cache`` ``[slots, L, max_ctx + block, nkv, hd]`` (amukkara/TensorRT-LLM
@ d70a2287, ``DFlashWorker._lazy_init_ctx_buffers``, dense layout of
``compute_dflash_ctx_buffer_bytes``); the emitted forward passes layer ``l`` as
``PagedKV(ctx_k_cache[:, l], ctx_v_cache[:, l], slots [N, 1], ctx)``. The capacity is no
power of two (8192 + 7 = 8199 at the MiniMax shape; 37 here). Oracle: float64, tests/support/oracles.py.
"""

import pytest
import torch

from draftsmith.lowering.base import MaskSpec, PagedKV, get_lowering
from support.interp import interpreter_suite
from support.oracles import oracle

CAPACITY = 37  # max_ctx + block, not a power of two
MASKS = [MaskSpec(causal=False, window=8), MaskSpec(causal=True, window=None), MaskSpec(causal=False, window=None)]

_child_results, interp_test = interpreter_suite(__file__)


def arena_case(seed=0, dtype=torch.float32, capacity=CAPACITY, nkv=2, hd=16, hq=4, b=4, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    slots, layers = 3, 2
    k = torch.randn(slots, layers, capacity, nkv, hd, generator=g).to(dtype)
    v = torch.randn(slots, layers, capacity, nkv, hd, generator=g).to(dtype)
    slot_of = torch.tensor([[2], [0]], dtype=torch.int32)  # sequence -> arena slot (slot 1 unused)
    ctx = torch.tensor([min(20, capacity - b), capacity - b], dtype=torch.int32)
    q = torch.randn(2, b, hq, hd, generator=g).to(dtype)
    kb = torch.randn(2, b, nkv, hd, generator=g).to(dtype)
    vb = torch.randn(2, b, nkv, hd, generator=g).to(dtype)
    return tuple(t.to(device) for t in (k, v, slot_of, ctx, q, kb, vb))


def check(name, mask, dtype=torch.float32, tol=2e-5, **shape):
    k, v, slot_of, ctx, q, kb, vb = arena_case(dtype=dtype, **shape)
    layer = 1
    cache = PagedKV(k[:, layer], v[:, layer], slot_of, ctx)  # views of the arena, no copy
    assert cache.k_pages.data_ptr() == k[:, layer].data_ptr() and cache.page_size == shape.get("capacity", CAPACITY)
    out = get_lowering(name).fn(q, cache, kb, vb, mask, q.shape[-1] ** -0.5)
    ks = [k[int(s), layer, :int(c)] for s, c in zip(slot_of[:, 0], ctx)]
    vs = [v[int(s), layer, :int(c)] for s, c in zip(slot_of[:, 0], ctx)]
    want, _ = oracle(q, ks, vs, kb, vb, mask.causal, mask.window, q.shape[-1] ** -0.5)
    torch.testing.assert_close(out.double(), want.to(out.device), atol=tol, rtol=tol)


@pytest.mark.parametrize("mask", MASKS, ids=str)
@pytest.mark.parametrize("name", ["dense", "window_decode_merge"])
def test_torch_lowerings_read_the_dense_arena(name, mask):
    check(name, mask)


@interp_test
@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_interp_triton_reads_the_dense_arena_of_any_capacity(mask):
    """Fails on the kernel that refused non-power-of-2 pages ("page size must be a power of 2, got 37")."""
    pytest.importorskip("triton")
    check("triton_window_block", mask, tol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mask", MASKS + [MaskSpec(causal=False, window=4096)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_triton_reads_the_minimax_sized_dense_arena(mask, dtype):
    """The MiniMax TP 4 per-rank shape (16 query / 1 KV heads, head dim 128, block 7) over an
    arena of capacity 8192 + 7 = 8199 (TMA tiles inside the slot's one page)."""
    pytest.importorskip("triton")
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-4
    check("triton_window_block", mask, dtype=dtype, tol=tol, capacity=8199, nkv=1, hd=128, hq=16, b=7,
          device="cuda")


def test_every_lowering_states_the_pools_it_reads():
    import draftsmith.lowering  # noqa: F401  (registers the built-ins)
    from draftsmith.lowering.base import LOWERINGS

    for name, info in LOWERINGS.items():
        assert set(info.pools) <= {"VANILLA", "TRTLLM", "FA4", "XQA"} and "VANILLA" in info.pools, name
