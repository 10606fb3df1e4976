"""Attention lowerings against a float64 oracle, on CPU (contract: ``lowering/base.py``)."""

from __future__ import annotations

import functools
import math
import zlib

import pytest
import torch

from draftsmith.lowering import LOWERINGS, MaskSpec, PagedKV, get_lowering
from draftsmith.lowering import trtllm_gen as trtllm_mod
from draftsmith.lowering.dense import dense
from draftsmith.lowering.trtllm_gen import trtllm_gen, trtllm_gen_decode_provider
from draftsmith.lowering.window_decode_merge import merge_lse, torch_decode_provider, window_decode_merge
from support.oracles import make_case, oracle, paged_cache, ring_pages_for

CPU_LOWERINGS = sorted(n for n, info in LOWERINGS.items() if "cpu" in info.devices and info.available())

# name: (context lengths, block size B, window W, page size P)
GEOMETRIES = {
    "ctx_lt_w": ([5], 4, 16, 4),
    "ctx_eq_w": ([16], 4, 16, 4),
    "ctx_gt_w": ([40], 4, 16, 4),
    "w_lt_b": ([20], 6, 3, 4),
    "w_1": ([9], 3, 1, 4),
    "page_1": ([13], 4, 8, 1),
    "ring_wrapped": ([100], 7, 16, 4),  # windowed: R = 5 pages of 4, C >> R * P
    "batch": ([0, 7, 33, 70], 7, 16, 8),  # different lengths, one empty context
}
MASKS = {
    "win_causal": lambda w: MaskSpec(causal=True, window=w),
    "win_noncausal": lambda w: MaskSpec(causal=False, window=w),
    "full_causal": lambda w: MaskSpec(causal=True),
    "full_noncausal": lambda w: MaskSpec(causal=False),
}
TOL = {  # (out rtol, out atol, lse atol)
    torch.float32: (1e-5, 1e-5, 1e-5),
    torch.bfloat16: (1e-2, 1e-2, 1e-4),
}


def seed_of(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def build(seed, geometry, mask, hq=4, hkv=2, d=64, dtype=torch.float32):
    ctx, b, w, p = GEOMETRIES[geometry]
    case = make_case(seed, ctx, b, hq, hkv, d, p, mask.window, dtype)
    case["scale"] = 1 / math.sqrt(d)
    return case


def run(fn, case, mask, **kw):
    return fn(case["q"], case["cache"], case["k_blk"], case["v_blk"], mask, case["scale"], return_lse=True, **kw)


def check(case, mask, out, lse):
    q = case["q"]
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    ref_out, ref_lse = oracle(q, case["ctx_k"], case["ctx_v"], case["k_blk"], case["v_blk"], mask.causal, mask.window, case["scale"])
    rtol, atol, lse_atol = TOL[q.dtype]
    torch.testing.assert_close(out.double(), ref_out, rtol=rtol, atol=atol)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=lse_atol)


def base2_provider(*args):
    """The torch provider with its LSE in base 2, as trtllm-gen returns it."""
    out, lse = torch_decode_provider(*args)
    return out, lse / math.log(2.0)


def emulate_trtllm_decode(*, query, kv_cache, block_tables, seq_lens, max_seq_len, bmm1_scale, bmm2_scale,
                          window_left, kv_layout, backend, q_len_per_req, return_lse):
    """flashinfer ``trtllm_batch_decode_with_kv_cache`` by its documented contract, float64 inside.

    Request ``r``: keys ``t < seq_lens[r]`` at page ``block_tables[r, t // P]`` slot ``t % P``
    (NHD pages), query at ``seq_lens[r] - 1``, keys ``>= seq_lens[r] - 1 - window_left``.
    Returns ``out`` in ``query.dtype`` and ``lse`` base 2, float32.
    """
    assert (backend, q_len_per_req, return_lse, bmm2_scale) == ("trtllm-gen", 1, True, 1.0)
    assert kv_layout in ("NHD", "HND") and isinstance(max_seq_len, int)
    assert block_tables.dtype == torch.int32 and query.shape[0] == block_tables.shape[0] == seq_lens.shape[0]
    assert seq_lens.dtype == torch.int32 and int(seq_lens.max()) <= max_seq_len
    k_cache, v_cache = kv_cache if kv_layout == "NHD" else (t.transpose(1, 2) for t in kv_cache)
    page = k_cache.shape[1]
    rep = query.shape[1] // k_cache.shape[2]
    out = torch.empty_like(query)
    lse = torch.empty(query.shape[:2], dtype=torch.float32)
    for r in range(query.shape[0]):
        n = int(seq_lens[r])
        t = torch.arange(n)
        lo = 0 if window_left < 0 else max(0, n - 1 - window_left)
        pages = block_tables[r].long()[t // page]
        k = k_cache[pages, t % page][lo:].double().repeat_interleave(rep, dim=1)
        v = v_cache[pages, t % page][lo:].double().repeat_interleave(rep, dim=1)
        s = torch.einsum("hd,thd->ht", query[r].double(), k) * bmm1_scale
        l = torch.logsumexp(s, dim=-1)
        out[r] = torch.einsum("ht,thd->hd", torch.exp(s - l[:, None]), v).to(query.dtype)
        lse[r] = (l / math.log(2.0)).float()
    return out, lse


def test_registry():
    assert {"dense", "window_decode_merge", "trtllm_gen"} <= set(LOWERINGS)
    assert {"dense", "window_decode_merge"} <= set(CPU_LOWERINGS)
    assert get_lowering("window_decode_merge").devices == ("cpu", "sm90", "sm100")
    info = get_lowering("trtllm_gen")
    assert info.devices == ("sm100",) and info.needs_context_kernel is False
    assert not info.available()  # no SM100 / flashinfer here
    assert "Never run here" in trtllm_mod.__doc__ and "Never run here" in trtllm_gen.__doc__
    with pytest.raises(KeyError, match="known"):
        get_lowering("nope")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("name", CPU_LOWERINGS)
def test_against_oracle(name, geometry, mask_name, dtype):
    mask = MASKS[mask_name](GEOMETRIES[geometry][2])
    case = build(seed_of(name, geometry, mask_name, dtype), geometry, mask, dtype=dtype)
    check(case, mask, *run(get_lowering(name).fn, case, mask))


@pytest.mark.parametrize("name", CPU_LOWERINGS)
def test_pages_stored_head_major(name):
    """The contract takes any page strides: pages stored ``[pages, Hkv, P, D]`` (TensorRT-LLM's
    per-block layout) and passed as their ``transpose(1, 2)`` view give the oracle's result."""
    mask = MASKS["win_noncausal"](16)
    case = build(seed_of(name, "hnd"), "batch", mask)
    c = case["cache"]
    kp, vp = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (c.k_pages, c.v_pages))
    assert not kp.is_contiguous() and kp.transpose(1, 2).is_contiguous()
    case["cache"] = PagedKV(kp, vp, c.block_table, c.ctx_lens)
    check(case, mask, *run(get_lowering(name).fn, case, mask))


@pytest.mark.parametrize("d", [64, 72, 80, 96, 128])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (16, 2)], ids=["gqa1", "gqa2", "gqa8"])
@pytest.mark.parametrize("name", CPU_LOWERINGS)
def test_gqa_and_head_dims(name, hq, hkv, d):
    mask = MASKS["win_noncausal" if d % 32 else "win_causal"](16)
    case = build(seed_of(name, hq, hkv, d), "batch", mask, hq=hq, hkv=hkv, d=d)
    check(case, mask, *run(get_lowering(name).fn, case, mask))


@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("geometry", ["w_lt_b", "ring_wrapped", "batch"])
def test_base2_provider(geometry, mask_name):
    mask = MASKS[mask_name](GEOMETRIES[geometry][2])
    case = build(seed_of("base2", geometry, mask_name), geometry, mask)
    check(case, mask, *run(window_decode_merge, case, mask, decode=base2_provider, lse_base=2))


def test_base2_lse_read_as_natural_is_wrong():
    """The base conversion matters: a base-2 LSE merged as natural gives a different answer."""
    mask = MaskSpec(causal=False, window=16)
    case = build(seed_of("base2-wrong"), "batch", mask)
    good, _ = run(window_decode_merge, case, mask, decode=base2_provider, lse_base=2)
    bad, _ = run(window_decode_merge, case, mask, decode=base2_provider, lse_base="e")
    assert (good - bad).abs().max() > 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("geometry", ["ctx_lt_w", "w_lt_b", "page_1", "ring_wrapped", "batch"])
def test_trtllm_gen_plumbing_emulated(geometry, mask_name, dtype, monkeypatch):
    """trtllm_gen end to end with the flashinfer call replaced by an emulation of its contract."""
    monkeypatch.setattr(trtllm_mod, "flashinfer_decode", emulate_trtllm_decode)
    mask = MASKS[mask_name](GEOMETRIES[geometry][2])
    case = with_scratch(build(seed_of("trtllm", geometry, mask_name, dtype), geometry, mask, dtype=dtype))
    check(case, mask, *run(trtllm_gen, case, mask))


def with_scratch(case, layout="nhd"):
    """The case's pool grown by NaN scratch pages (``ceil((P-1+B)/P)`` a sequence, at random places
    among the pool's pages), named in ``cache.scratch_pages``; ``layout="hnd"``: the pool stored
    ``[pages, Hkv, P, D]`` and passed as its ``transpose(1, 2)`` view (TensorRT-LLM's HND blocks)."""
    c = case["cache"]
    n, b = case["k_blk"].shape[:2]
    p = c.page_size
    s = trtllm_mod.scratch_page_count(p, b)
    g = torch.Generator().manual_seed(seed_of("scratch", n, b, p))
    total = c.k_pages.shape[0] + n * s
    perm = torch.randperm(total, generator=g)
    k = torch.full((total,) + tuple(c.k_pages.shape[1:]), float("nan"), dtype=c.k_pages.dtype)
    v = torch.full_like(k, float("nan"))
    k[perm[: c.k_pages.shape[0]]], v[perm[: c.k_pages.shape[0]]] = c.k_pages, c.v_pages
    table = perm[c.block_table.long()].to(torch.int32)
    scratch = perm[c.k_pages.shape[0]:].view(n, s).to(torch.int32)
    if layout == "hnd":
        k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))
    return {**case, "cache": PagedKV(k, v, table, c.ctx_lens, scratch)}


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_trtllm_gen_requests_follow_the_contract(layout):
    """The plumbing itself, by the documented contract (drafter reference section 2, flashinfer's
    trtllm_batch_decode_with_kv_cache): request ``(n, j)`` reads, through its linear block table,
    exactly context ``0..C_n-1`` then block keys ``0..j`` (``seq_len`` keys, the last its own); the
    pool is read in place (a linear-table entry is a page of the ring table or a scratch page);
    ``window_left`` is ``W - 1``; the LSE handed to the merge is base 2."""
    mask = MaskSpec(causal=False, window=16)
    case = with_scratch(build(seed_of("trtllm-req", layout), "batch", mask), layout)
    q, cache, kb = case["q"], case["cache"], case["k_blk"]
    trtllm_mod.write_scratch(cache, kb, case["v_blk"])
    req = trtllm_mod.decode_requests(q, cache, mask.reach)
    assert req["kv_layout"] == layout.upper()
    k_pool = req["kv_cache"][0] if layout == "nhd" else req["kv_cache"][0].transpose(1, 2)
    assert k_pool.data_ptr() == cache.k_pages.data_ptr()  # the pool itself, no copy
    p, b = cache.page_size, q.shape[1]
    owned = set(cache.block_table.flatten().tolist()) | set(cache.scratch_pages.flatten().tolist())
    for n, c in enumerate(case["cache"].ctx_lens.tolist()):
        for j in range(b):
            r = n * b + j
            length = int(req["seq_lens"][r])
            t = torch.arange(length)
            pages = req["block_tables"][r].long()[t // p]
            assert set(pages.tolist()) <= owned
            keys = k_pool[pages, t % p]
            lo = c - mask.reach + j  # the window's lowest position for query j
            want = torch.cat([case["ctx_k"][n], kb[n, : j + 1]])  # positions 0..C+j
            seen = keys[max(0, length - 1 - mask.reach):]
            assert torch.equal(seen, want[max(0, lo):]), (n, j)
            assert req["block_tables"].shape[1] == cache.ring_pages + trtllm_mod.scratch_page_count(p, b)


def test_trtllm_gen_refuses_a_cache_without_scratch_pages():
    mask = MaskSpec(causal=False, window=16)
    case = build(seed_of("trtllm-noscratch"), "batch", mask)
    with pytest.raises(ValueError, match="scratch_pages"):
        run(trtllm_gen, case, mask, )


def test_trtllm_provider_lse_is_base2():
    mask = MaskSpec(causal=True, window=16)
    case = with_scratch(build(seed_of("trtllm-lse"), "ctx_gt_w", mask))
    args = (case["q"], case["cache"], case["k_blk"], case["v_blk"], 15, case["scale"])
    _, lse2 = trtllm_gen_decode_provider(*args, kernel=emulate_trtllm_decode)
    _, lse_e = torch_decode_provider(*args)
    torch.testing.assert_close(lse2 * math.log(2.0), lse_e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [16, 2, None])
def test_last_query_is_exactly_part_a(window):
    """Empty part B (last query): lse_B = -inf and the result is out_A bit for bit, no NaN."""
    mask = MaskSpec(causal=False, window=window)
    case = build(seed_of("last", window), "batch", mask, dtype=torch.bfloat16)
    out, lse = run(window_decode_merge, case, mask)
    wl = -1 if window is None else window - 1
    out_a, lse_a = torch_decode_provider(case["q"], case["cache"], case["k_blk"], case["v_blk"], wl, case["scale"])
    assert torch.isfinite(out).all()
    assert torch.equal(out[:, -1], out_a[:, -1].to(out.dtype))
    assert torch.equal(lse[:, -1], lse_a[:, -1])


def test_merge_lse_empty_part_b():
    g = torch.Generator().manual_seed(seed_of("merge"))
    out_a, out_b = torch.randn(3, 5, 8, generator=g), torch.randn(3, 5, 8, generator=g)
    lse_a, lse_b = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    lse_b[:, -1] = -math.inf
    out, lse = merge_lse(out_a, lse_a, out_b, lse_b)
    assert torch.equal(out[:, -1], out_a[:, -1]) and torch.equal(lse[:, -1], lse_a[:, -1])
    wa, wb = torch.exp(lse_a[:, :-1]), torch.exp(lse_b[:, :-1])  # softmax denominators
    ref = (wa[..., None] * out_a[:, :-1] + wb[..., None] * out_b[:, :-1]) / (wa + wb)[..., None]
    torch.testing.assert_close(out[:, :-1], ref)
    torch.testing.assert_close(lse[:, :-1], torch.log(wa + wb))


def test_recycled_position_gives_nan_rows():
    """A full-attention mask over a windowed ring that has wrapped needs recycled positions."""
    g = torch.Generator().manual_seed(seed_of("recycled"))
    w, p, c, hkv, d = 8, 4, 50, 2, 16
    ctx_k, ctx_v = [torch.randn(c, hkv, d, generator=g)], [torch.randn(c, hkv, d, generator=g)]
    cache = paged_cache(ctx_k, ctx_v, p, ring_pages_for(w, p, c), g)
    assert cache.oldest(0) > 0
    q = torch.randn(1, 4, 4, d, generator=g)
    kb, vb = torch.randn(1, 4, hkv, d, generator=g), torch.randn(1, 4, hkv, d, generator=g)
    for mask in (MaskSpec(causal=True), MaskSpec(causal=False), MaskSpec(causal=False, window=64)):
        for fn in (dense, window_decode_merge):  # no host read to raise with: NaN rows, never a silent answer
            assert torch.isnan(fn(q, cache, kb, vb, mask, 0.25)).all(), (fn, mask)
    assert torch.isfinite(dense(q, cache, kb, vb, MaskSpec(causal=False, window=w), 0.25)).all()  # stored


def test_bad_inputs():
    mask = MaskSpec(causal=False, window=16)
    case = build(seed_of("bad"), "ctx_gt_w", mask)
    with pytest.raises(ValueError, match="lse_base"):
        run(window_decode_merge, case, mask, lse_base=10)
    for fn in (dense, window_decode_merge):
        with pytest.raises(ValueError, match="k_blk"):
            fn(case["q"], case["cache"], case["k_blk"][:, :-1], case["v_blk"], mask, case["scale"])


def test_return_lse_false_returns_tensor():
    mask = MaskSpec(causal=False, window=16)
    case = build(seed_of("nolse"), "ctx_gt_w", mask)
    for fn in (dense, window_decode_merge, functools.partial(window_decode_merge, decode=base2_provider, lse_base=2)):
        out = fn(case["q"], case["cache"], case["k_blk"], case["v_blk"], mask, case["scale"])
        assert isinstance(out, torch.Tensor) and out.shape == case["q"].shape


def to_device(case, device):
    c = case["cache"]
    moved = {k: case[k].to(device) for k in ("q", "k_blk", "v_blk")}
    moved["cache"] = type(c)(*(t.to(device) for t in (c.k_pages, c.v_pages, c.block_table, c.ctx_lens)))
    return {**case, **moved}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("name", sorted(n for n, i in LOWERINGS.items() if i.available()))
def test_cuda_matches_oracle(name, mask_name, dtype):
    mask = MASKS[mask_name](16)
    case = build(seed_of("cuda", name, mask_name, dtype), "batch", mask, hq=16, hkv=2, d=128, dtype=dtype)
    out, lse = run(get_lowering(name).fn, to_device(case, "cuda"), mask)
    assert out.device.type == "cuda"
    check(case, mask, out.cpu(), lse.cpu())
