"""Tests of the ``triton_window_block`` lowering against the float64 oracle (``oracles.py``).

CPU tests (``test_interp_*``) run the kernels through Triton's interpreter on CPU tensors,
in a child pytest (see ``interp.py``). GPU tests (``-m gpu``) are skipped without CUDA.
"""

import math

import pytest
import torch

triton = pytest.importorskip("triton")

from draftsmith.lowering.base import LOWERINGS, MaskSpec, PagedKV  # noqa: E402
from draftsmith.lowering.triton_window_block import Config, triton_window_block  # noqa: E402
from support.interp import interpreter_suite  # noqa: E402
from support.oracles import oracle as block_oracle  # noqa: E402
from support.poison import poison_torch_empty  # noqa: E402

HAS_CUDA = torch.cuda.is_available()


_child_results, interp_test = interpreter_suite(__file__)


# ----------------------------------------------------------------------------- oracle


def oracle(q, k_pages, v_pages, block_table, ctx_lens, k_blk, v_blk, causal, window, scale):
    """float64 reference on a ring-paged cache: the positions the ring still holds
    (``oldest .. C-1``, from the page math here) gathered, then :func:`oracles.oracle`.
    Returns (out, lse) float64."""
    page, ring = k_pages.shape[1], block_table.shape[1]
    ks, vs, starts = [], [], []
    for n in range(q.shape[0]):
        c = int(ctx_lens[n])
        oldest = 0 if c == 0 else max(0, ((c - 1) // page) * page - (ring - 1) * page)
        t = torch.arange(oldest, c, device=q.device)
        pages = block_table[n].long()[(t // page) % ring]
        ks.append(k_pages[pages, t % page])
        vs.append(v_pages[pages, t % page])
        starts.append(oldest)
    return block_oracle(q, ks, vs, k_blk, v_blk, causal, window, scale, ctx_start=starts)


# ----------------------------------------------------------------------------- inputs


def make_case(n_seq, b, hq, hkv, d, page, ctx, window, dtype=torch.float32, device="cpu", ring=None,
              poison_unreachable=False, gen=None, layout="nhd"):
    """Random q/k_blk/v_blk and a ring-paged cache; free pages are filled with NaN.

    ``layout="hnd"``: the pages are stored as contiguous ``[pages, Hkv, P, D]`` (TensorRT-LLM's
    per-block layout) and passed as their ``[pages, P, Hkv, D]`` view.

    ``ring``: pages per sequence; default the contract's ``ceil((W-1)/P)+1`` for a window,
    enough for the longest context (plus one) for full attention. With
    ``poison_unreachable`` the stored context positions no query can see are NaN too.
    """
    if ring is None:
        ring = math.ceil((window - 1) / page) + 1 if window else max(1, math.ceil(max(ctx) / page)) + 1
    spare = 3
    total = n_seq * ring + spare
    kw = dict(dtype=dtype, device=device)
    k_pages = torch.randn(total, page, hkv, d, generator=gen, **kw)
    v_pages = torch.randn(total, page, hkv, d, generator=gen, **kw)
    perm = torch.randperm(total, generator=gen)
    block_table = perm[: n_seq * ring].reshape(n_seq, ring).to(torch.int32)
    for p in perm[n_seq * ring:]:
        k_pages[p] = float("nan")
        v_pages[p] = float("nan")
    if poison_unreachable and window:
        for n, c in enumerate(ctx):
            oldest = 0 if c == 0 else max(0, ((c - 1) // page) * page - (ring - 1) * page)
            for t in range(oldest, max(oldest, c - (window - 1))):
                pg = int(block_table[n, (t // page) % ring])
                k_pages[pg, t % page] = float("nan")
                v_pages[pg, t % page] = float("nan")
    if layout == "hnd":
        k_pages, v_pages = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k_pages, v_pages))
    q = torch.randn(n_seq, b, hq, d, generator=gen, **kw)
    k_blk = torch.randn(n_seq, b, hkv, d, generator=gen, **kw)
    v_blk = torch.randn(n_seq, b, hkv, d, generator=gen, **kw)
    cache = PagedKV(k_pages, v_pages, block_table.to(device), torch.tensor(ctx, dtype=torch.int32, device=device))
    return q, cache, k_blk, v_blk


def run_and_check(q, cache, k_blk, v_blk, causal, window, config=None, tol=1e-5, lse_tol=1e-4):
    """Poison the outputs, run the lowering, compare with the oracle; returns rel. error."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    mask = MaskSpec(causal=causal, window=window)
    out, lse = triton_window_block(q, cache, k_blk, v_blk, mask, scale, return_lse=True, config=config)
    ref, ref_lse = oracle(q, cache.k_pages, cache.v_pages, cache.block_table, cache.ctx_lens,
                          k_blk, v_blk, causal, window, scale)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    assert torch.isfinite(out).all(), "output has NaN/inf (unwritten, or read a poisoned key)"
    assert torch.isfinite(lse).all()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < tol, f"relative error {err:.3g}"
    lse_err = (lse.double() - ref_lse).abs().max().item()
    assert lse_err < lse_tol, f"lse error {lse_err:.3g}"
    return err


@pytest.fixture(autouse=True)
def _poisoned_empty(monkeypatch):
    """Every torch.empty during a test returns NaN-filled memory (unwritten -> NaN)."""
    poison_torch_empty(monkeypatch)


# ----------------------------------------------------------------------------- CPU (interpreter)

W, P = 8, 4
# ctx: empty, shorter than W, W-1, W, wrapped ring, one-token last page, long wrapped.
MIXED = [0, 3, W - 1, W, 2 * W + 5, 6 * P + 1, 41]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("splits", [None, 1, 3])
@interp_test
def test_interp_window_mixed_lengths(causal, splits):
    gen = torch.Generator().manual_seed(100 + 10 * causal + (splits or 0))
    case = make_case(len(MIXED), 3, 4, 2, 64, P, MIXED, W, gen=gen, poison_unreachable=True)
    cfg = None if splits is None else Config(block_m=16, block_n=16, num_splits=splits, num_warps=4, num_stages=2)
    run_and_check(*case, causal=causal, window=W, config=cfg)


@pytest.mark.parametrize("causal", [False, True])
@interp_test
def test_interp_interior_tiles(causal):
    """W 40 in tiles of 16: masked edge tile, unmasked interior tiles, masked tail, splits."""
    gen = torch.Generator().manual_seed(21 + causal)
    ctx = [0, 10, 39, 40, 100, 57]
    case = make_case(len(ctx), 5, 4, 2, 64, P, ctx, 40, gen=gen, poison_unreachable=True)
    for splits in (1, 2):
        cfg = Config(block_m=16, block_n=16, num_splits=splits, num_warps=4, num_stages=2)
        run_and_check(*case, causal=causal, window=40, config=cfg)


@pytest.mark.parametrize("causal,ws,layout", [(False, False, "nhd"), (True, False, "nhd"), (False, True, "nhd"),
                                               (True, True, "nhd"), (False, False, "hnd"), (True, False, "hnd")])
@interp_test
def test_interp_tma_interior_tiles(causal, ws, layout):
    """Interior tiles through tensor descriptors (tile = 16 keys of a 16-key page), edge tiles
    gathered; the first tile starts below the window (its keys there are NaN-poisoned).
    Both page layouts the descriptors take (``[pages, P, Hkv, D]`` and ``[pages, Hkv, P, D]``)."""
    from draftsmith.lowering.page_layout import page_layout

    gen = torch.Generator().manual_seed(31 + causal + 2 * ws + 4 * (layout == "hnd"))
    page, window = 16, 80
    ctx = [0, 10, 79, 80, 200, 97, 161]
    case = make_case(len(ctx), 5, 4, 2, 64, page, ctx, window, gen=gen, poison_unreachable=True, layout=layout)
    assert page_layout(case[1].k_pages) == layout
    for splits in (1, 2, 3):
        cfg = Config(block_m=32, block_n=16, num_splits=splits, num_warps=4, num_stages=2, tma=True,
                     warp_specialize=ws)
        run_and_check(*case, causal=causal, window=window, config=cfg)


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_tma_rows_address_every_key(layout):
    """The 2-D view TMA tiles read (both kernels) holds key ``slot`` of page ``pg``, head ``h``
    at row ``pg * TMA_PAGE + h * TMA_HEAD + slot``, columns from ``h * TMA_COL``, and is a view
    of the pages' storage; other strides are refused."""
    from draftsmith.lowering.page_layout import tma_rows

    num, page, hkv, d = 5, 8, 3, 16
    if layout == "hnd":
        pages = torch.randn(num, hkv, page, d).transpose(1, 2)
    else:
        pages = torch.randn(num, page, hkv, d)
    rows, (tp, th, tc) = tma_rows(pages)
    assert rows.data_ptr() == pages.data_ptr()
    for pg in range(num):
        for slot in range(page):
            for h in range(hkv):
                r = pg * tp + h * th + slot
                assert torch.equal(rows[r, h * tc: h * tc + d], pages[pg, slot, h])
    with pytest.raises(ValueError, match="tma tiles need"):
        tma_rows(pages[..., :8])  # rows of D no longer contiguous runs


def test_gluon_gated_on_triton_release_and_device(monkeypatch):
    """The Gluon kernel is offered only with a triton release it was verified with (3.6),
    and never for CPU tensors; otherwise triton_window_block keeps its Triton kernel."""
    from draftsmith.lowering import gluon_window_block as gwb

    if gwb.gluon is None:
        assert not gwb.available()
        return
    monkeypatch.setattr(gwb.triton, "__version__", "3.9.0")
    assert not gwb.available()
    monkeypatch.setattr(gwb.triton, "__version__", "3.6.0")
    assert gwb.available()
    q, cache, kb, vb = make_case(1, 7, 8, 2, 128, 64, [100], 80, dtype=torch.bfloat16)
    assert not gwb.fits(q, cache, kb, vb)  # CPU tensors


def test_tma_refused_on_unfit_shapes():
    q, cache, kb, vb = make_case(1, 2, 2, 1, 64, P, [3], W)
    cfg = Config(block_m=16, block_n=16, num_splits=1, num_warps=4, num_stages=2, tma=True)
    with pytest.raises(ValueError, match="block_n <= page"):
        from draftsmith.lowering.triton_window_block import _descriptors
        _descriptors(cache.k_pages, cache.v_pages, cfg, 64, 64)


def test_gluon_boxes_never_cross_a_page():
    """The Gluon kernel loads a 64-key tile as boxes of ``sub_rows(P)`` keys, so that every box
    starts and ends inside one page (pages are powers of two; sub_rows holds for any multiple
    of 8 too)."""
    from draftsmith.lowering.gluon_window_block import TILE, sub_rows

    want = {8: 8, 16: 16, 32: 32, 64: 64, 128: 64, 256: 64, 48: 16, 96: 32}
    assert {p: sub_rows(p) for p in want} == want
    for page in range(8, 520, 8):
        sub = sub_rows(page)
        assert TILE % sub == 0 and page % sub == 0
        for t0 in range(0, 4 * page, TILE):  # every box of every tile lies in one page
            assert all((t0 + j) // page == (t0 + j + sub - 1) // page for j in range(0, TILE, sub))


@pytest.mark.parametrize("causal", [False, True])
@interp_test
def test_interp_block_longer_than_window(causal):
    gen = torch.Generator().manual_seed(7 + causal)
    case = make_case(3, 9, 4, 1, 64, P, [0, 2, 13], 4, gen=gen, poison_unreachable=True)
    run_and_check(*case, causal=causal, window=4)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("splits", [1, 2])
@interp_test
def test_interp_full_attention(causal, splits):
    gen = torch.Generator().manual_seed(11 + causal + 2 * splits)
    cfg = Config(block_m=16, block_n=16, num_splits=splits, num_warps=4, num_stages=2)
    case = make_case(3, 4, 4, 2, 64, P, [0, 5, 37], None, gen=gen)
    run_and_check(*case, causal=causal, window=None, config=cfg)


@pytest.mark.parametrize("d", [72, 80])
@interp_test
def test_interp_non_pow2_head_dim(d):
    gen = torch.Generator().manual_seed(d)
    case = make_case(2, 3, 2, 1, d, P, [6, 19], W, gen=gen, poison_unreachable=True)
    run_and_check(*case, causal=False, window=W)


@pytest.mark.parametrize("page", [1, 16])
@interp_test
def test_interp_page_sizes(page):
    gen = torch.Generator().manual_seed(page)
    case = make_case(2, 2, 2, 2, 64, page, [9, 40], 12, gen=gen, poison_unreachable=True)
    run_and_check(*case, causal=False, window=12)


@interp_test
def test_interp_several_row_blocks():
    """B*G = 40 rows in tiles of 16: three row blocks per KV head, with splits."""
    gen = torch.Generator().manual_seed(5)
    case = make_case(2, 5, 16, 2, 64, P, [11, 30], W, gen=gen, poison_unreachable=True)
    cfg = Config(block_m=16, block_n=16, num_splits=2, num_warps=4, num_stages=2)
    run_and_check(*case, causal=False, window=W, config=cfg)


@interp_test
def test_interp_window_one():
    """W = 1: each query sees only itself."""
    gen = torch.Generator().manual_seed(3)
    case = make_case(2, 3, 2, 1, 64, P, [0, 9], 1, gen=gen, ring=2)
    run_and_check(*case, causal=False, window=1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@interp_test
def test_interp_low_precision_no_lse(dtype):
    """Half/bf16 inputs, output in the input dtype, no LSE requested."""
    gen = torch.Generator().manual_seed(9)
    q, cache, kb, vb = make_case(2, 3, 4, 2, 64, P, [5, 17], W, dtype=dtype, gen=gen)
    mask = MaskSpec(causal=False, window=W)
    out = triton_window_block(q, cache, kb, vb, mask, 0.125)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype
    ref, _ = oracle(q, cache.k_pages, cache.v_pages, cache.block_table, cache.ctx_lens, kb, vb, False, W, 0.125)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("rows", [1, 2, 8])
@pytest.mark.parametrize("splits", [2, 5])
@interp_test
def test_interp_merge_splits(rows, splits):
    """The split merge against a float64 log-sum-exp merge: rows per program not dividing the
    row count, splits that saw no key (-inf), and a row no split saw (output 0, LSE -inf)."""
    from draftsmith.lowering.split_merge import merge_splits

    gen = torch.Generator().manual_seed(rows * 10 + splits)
    n, b, hq, d = 2, 3, 5, 16
    po = torch.randn(n, b, hq, splits, d, generator=gen)
    plse = torch.randn(n, b, hq, splits, generator=gen) * 3
    plse[0, 1, :, 0] = float("-inf")
    plse[1, 2, 4, :] = float("-inf")
    out = torch.empty(n, b, hq, d)
    lse = torch.empty(n, b, hq)
    merge_splits(po, plse, out, lse, rows=rows, num_warps=1)
    p64 = plse.double()
    top = p64.max(-1, keepdim=True).values.clamp(min=-1e300)
    wts = torch.exp2(p64 - top)
    den = wts.sum(-1)
    ref = (po.double() * wts[..., None]).sum(-2) / den.clamp(min=1e-300)[..., None]
    ref_lse = (top[..., 0] + torch.log2(den)) * math.log(2)
    seen = den > 0
    assert torch.allclose(out[seen].double(), ref[seen], atol=1e-5, rtol=1e-5)
    assert torch.allclose(lse[seen].double(), ref_lse[seen], atol=1e-5)
    assert (out[~seen] == 0).all() and (lse[~seen] == float("-inf")).all() and (~seen).sum() == 1


def test_registered():
    info = LOWERINGS["triton_window_block"]
    assert info.fn is triton_window_block and not info.needs_context_kernel
    assert set(info.devices) == {"cpu", "sm90", "sm100"}


def test_cpu_refused_without_flag(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    q, cache, kb, vb = make_case(1, 2, 2, 1, 64, P, [3], W)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        triton_window_block(q, cache, kb, vb, MaskSpec(causal=False, window=W), 0.125)


def test_bad_shapes_refused():
    q, cache, kb, vb = make_case(1, 2, 3, 2, 64, P, [3], W)
    with pytest.raises(ValueError, match="multiple"):
        triton_window_block(q, cache, kb, vb, MaskSpec(causal=False, window=W), 0.125)


# ----------------------------------------------------------------------------- GPU

gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")


TMA_CONFIGS = [None] + [Config(block_m=bm, block_n=64, num_splits=s, num_warps=w, num_stages=3, tma=True)
                        for bm, w, s in ((128, 8, 1), (128, 8, 3), (64, 4, 5))]
TMA_CONFIGS.append(Config(block_m=64, block_n=64, num_splits=12, num_warps=4, num_stages=5, tma=True))
TMA_IDS = ["auto", "tma128", "tma128s3", "tma64s5", "tma64s12"]
GLUON_CFG = Config(block_m=64, block_n=64, num_splits=1, num_warps=4, num_stages=1, tma=True, gluon=True)
GLUON_SPLIT_CFG = Config(block_m=64, block_n=64, num_splits=9, num_warps=4, num_stages=1, tma=True, gluon=True)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("cfg", TMA_CONFIGS + [GLUON_CFG, GLUON_SPLIT_CFG], ids=TMA_IDS + ["gluon", "gluon_s9"])
def test_gpu_minimax_shape(cfg):
    """Hq 64, Hkv 4, D 128, B 7, W 4096, bf16, page 64, mixed lengths incl. wrapped rings."""
    gen = torch.Generator().manual_seed(1)
    case = make_case(4, 7, 64, 4, 128, 64, [9000, 4095, 100, 0], 4096, dtype=torch.bfloat16, gen=gen,
                     poison_unreachable=True)
    case = tuple(x.cuda() for x in case[:1]) + (_cache_to(case[1], "cuda"),) + tuple(x.cuda() for x in case[2:])
    if cfg is not None and cfg.gluon and not _gluon_fits(case):
        pytest.skip("the Gluon kernel needs an SM90 GPU and Gluon's Hopper API")
    for causal in (False, True):
        run_and_check(*case, causal=causal, window=4096, config=cfg, tol=1e-2, lse_tol=2e-2)


GLUON = GLUON_CFG


def _gluon_here():
    """An SM90 GPU and a triton whose Gluon API the kernel was verified with."""
    from draftsmith.lowering import gluon_window_block

    return gluon_window_block.available() and torch.cuda.get_device_capability()[0] == 9


def _gluon_fits(case):
    from draftsmith.lowering import gluon_window_block

    return gluon_window_block.fits(case[0], case[1], case[2], case[3])


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("b,hq", [(1, 32), (7, 32), (16, 16), (7, 8)], ids=["rows16", "rows112", "rows128", "rows28"])
@pytest.mark.parametrize("causal,window", [(False, 300), (True, 300), (False, None), (True, None)])
@pytest.mark.parametrize("d,page,layout", [(128, 64, "nhd"), (64, 128, "hnd"), (128, 32, "hnd"), (64, 16, "nhd"),
                                           (256, 32, "hnd")])
def test_gpu_gluon_kernel(b, hq, causal, window, d, page, layout):
    """The warp-specialized Gluon kernel (SM90): one or two consumer partitions, window edges
    cut inside a tile, a partial last tile, short / empty / wrapped contexts, NaN in every
    slot the mask cannot reach, both page layouts, pages of 16-128 tokens (a tile over two or
    four pages); without LSE it writes the same output."""
    gen = torch.Generator().manual_seed(b * 100 + hq + 7 * causal + d + (window or 0))
    ctx = [1000, 299, 64, 0, 5003] if window else [1000, 299, 64, 0, 130]
    case = _gpu_case(len(ctx), b, hq, 2, d, page, ctx, window, dtype=torch.bfloat16, gen=gen,
                     poison_unreachable=True, layout=layout)
    if not _gluon_fits(case):
        assert not _gluon_here(), "an SM90 GPU with Gluon: every case here must take the Gluon kernel"
        pytest.skip("the Gluon kernel does not apply here (needs an SM90 GPU and Gluon's Hopper API)")
    run_and_check(*case, causal=causal, window=window, config=GLUON, tol=1e-2, lse_tol=2e-2)
    mask = MaskSpec(causal=causal, window=window)
    scale = d ** -0.5
    out_lse, _ = triton_window_block(*case[:4], mask, scale, return_lse=True, config=GLUON)
    out = triton_window_block(*case[:4], mask, scale, config=GLUON)
    assert torch.equal(out, out_lse)


def _require_gluon(case):
    """Skip unless the Gluon kernel applies to ``case`` (an SM90 GPU and Gluon's Hopper API)."""
    if not _gluon_fits(case):
        pytest.skip("the Gluon kernel does not apply here (needs an SM90 GPU and Gluon's Hopper API)")


def _assert_oracle(case, out, lse, causal, window, scale):
    """``out`` and ``lse`` of ``case`` against the float64 oracle: finite, the output within 1e-2
    (relative norm), the LSE within 2e-2."""
    q, cache, kb, vb = case
    ref, ref_lse = oracle(q, cache.k_pages, cache.v_pages, cache.block_table, cache.ctx_lens, kb, vb,
                          causal, window, scale)
    assert torch.isfinite(out).all()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
    assert (lse.double() - ref_lse).abs().max().item() < 2e-2


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("pingpong", [False, True])
@pytest.mark.parametrize("causal,window", [(False, 300), (True, None)])
def test_gpu_gluon_overlap_builds(overlap, pingpong, causal, window):
    """Every build of the Gluon kernel's consumer loop (the next tile's Q K^T issued before this
    tile's softmax, or each MMA waited for; the two consumers taking turns at the tensor cores,
    or not) against the float64 oracle: contexts with 0, 1, 2 and many ring tiles, NaN wherever
    the mask cannot reach."""
    from draftsmith.lowering import gluon_window_block as gwb

    gen = torch.Generator().manual_seed(31 + overlap + 2 * causal + 4 * pingpong)
    ctx = [5003, 1000, 299, 130, 64, 0]
    case = _gpu_case(len(ctx), 7, 64, 4, 128, 64, ctx, window, dtype=torch.bfloat16, gen=gen,
                     poison_unreachable=True)
    _require_gluon(case)
    q, cache, kb, vb = case
    scale = q.shape[-1] ** -0.5
    out, lse = gwb.launch(q, cache, kb, vb, MaskSpec(causal=causal, window=window), scale, return_lse=True,
                          overlap=overlap, pingpong=pingpong)
    _assert_oracle(case, out, lse, causal, window, scale)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("splits", [2, 5, 33])
@pytest.mark.parametrize("causal,window", [(False, 300), (True, None), (False, 4096)])
@pytest.mark.parametrize("d", [128, 256])
def test_gpu_gluon_kernel_splits(splits, causal, window, d):
    """The Gluon kernel with split-KV: chunks cut inside the window and at its edge, splits
    that see no key (short and empty contexts), the block's keys in the last split only; head
    dims 128 and 256 (32-key tiles); the merged output and LSE against the oracle."""
    gen = torch.Generator().manual_seed(splits * 10 + causal + (window or 0) + d)
    ctx = [5003, 1000, 299, 64, 0]
    case = _gpu_case(len(ctx), 7, 64, 4, d, 64, ctx, window, dtype=torch.bfloat16, gen=gen,
                     poison_unreachable=True)
    _require_gluon(case)
    cfg = Config(block_m=64, block_n=64, num_splits=splits, num_warps=4, num_stages=1, tma=True, gluon=True)
    run_and_check(*case, causal=causal, window=window, config=cfg, tol=1e-2, lse_tol=2e-2)


@pytest.mark.gpu
@gpu
def test_gpu_gluon_block_kv_views():
    """The block's K and V as views with strides of their own (as sliced from a fused
    projection): the Gluon kernel reads each through its own strides; a view whose rows are
    not on 16 bytes is refused by fits() and runs the Triton kernel, also exactly."""
    gen = torch.Generator().manual_seed(17)
    q, cache, kb, vb = _gpu_case(3, 7, 64, 4, 128, 64, [700, 64, 0], 300, dtype=torch.bfloat16, gen=gen,
                                 poison_unreachable=True)
    wide = torch.full((3, 7, 9, 128), float("nan"), dtype=vb.dtype, device="cuda")
    wide[:, :, 2:6] = vb
    vb_view = wide[:, :, 2:6]
    _require_gluon((q, cache, kb, vb_view))
    assert vb_view.stride() != kb.stride()
    run_and_check(q, cache, kb, vb_view, causal=False, window=300, config=GLUON, tol=1e-2, lse_tol=2e-2)
    flat = torch.full((kb.numel() + 1,), float("nan"), dtype=kb.dtype, device="cuda")
    kb_odd = flat[1:].view(kb.shape)
    kb_odd.copy_(kb)
    assert not _gluon_fits((q, cache, kb_odd, vb))
    from draftsmith.lowering.triton_window_block import choose_config

    assert not choose_config(3, 7, 64, 4, 128, 299, q.device, tma_ok=True,
                             gluon_ok=_gluon_fits((q, cache, kb_odd, vb))).gluon
    run_and_check(q, cache, kb_odd, vb, causal=False, window=300, tol=1e-2, lse_tol=2e-2)


def test_merge_config_rows(monkeypatch):
    """The merge takes one row per program while rows are few, up to MERGE_MAX_ROWS once
    they outnumber programs, and never more than 64 partials per program."""
    from draftsmith.lowering import jit, split_merge
    from draftsmith.lowering import triton_window_block as twb

    dev = torch.device("cuda", 0)
    monkeypatch.setitem(jit._SM_COUNT, 0, 132)
    rows = lambda n, s: split_merge.merge_config(n * 7 * 64, s, dev)[0]  # noqa: E731
    assert rows(1, 15) == 1 and rows(4, 8) == 2
    assert rows(16, 2) == split_merge.MERGE_MAX_ROWS == 8
    assert rows(256, 16) == 4 and rows(256, 64) == 1


def test_gluon_config_splits_only_below_one_program_per_sm(monkeypatch):
    """With the Gluon kernel, splits fill the multiprocessors at small batch in one wave (one
    program each), never below GLUON_MIN_KEYS keys, and stop once N * Hkv programs cover them."""
    from draftsmith.lowering import jit, split_merge
    from draftsmith.lowering import triton_window_block as twb

    dev = torch.device("cuda", 0)
    monkeypatch.setitem(jit._SM_COUNT, 0, 132)
    split = lambda n, span=4095: twb.choose_config(n, 7, 64, 4, 128, span, dev, tma_ok=True,  # noqa: E731
                                                   gluon_ok=True)
    assert all(split(n).gluon for n in (1, 16, 33, 64))
    assert [split(n).num_splits for n in (1, 2, 16, 32, 33, 64, 256)] == [15, 15, 2, 1, 1, 1, 1]
    assert split(1, span=300).num_splits == 300 // twb.GLUON_MIN_KEYS
    assert twb.choose_config(1, 7, 64, 4, 128, 4095, dev, tma_ok=True, gluon_ok=True, num_splits=5).num_splits == 5


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("cfg", [TMA_CONFIGS[0], TMA_CONFIGS[-1]], ids=["auto", "tma64s12"])
def test_gpu_minimax_shape_hnd_pages(cfg):
    """The MiniMax shape with pages stored ``[pages, Hkv, P, D]`` (TensorRT-LLM's layout)."""
    from draftsmith.lowering.page_layout import page_layout

    gen = torch.Generator().manual_seed(2)
    case = _gpu_case(4, 7, 64, 4, 128, 64, [9000, 4095, 100, 0], 4096, dtype=torch.bfloat16, gen=gen,
                     poison_unreachable=True, layout="hnd")
    assert page_layout(case[1].k_pages) == "hnd" and page_layout(case[1].v_pages) == "hnd"
    for causal in (False, True):
        run_and_check(*case, causal=causal, window=4096, config=cfg, tol=1e-2, lse_tol=2e-2)


def _cache_to(cache, device):
    return PagedKV(cache.k_pages.to(device), cache.v_pages.to(device), cache.block_table.to(device),
                   cache.ctx_lens.to(device))


def _gpu_case(*args, **kw):
    q, cache, kb, vb = make_case(*args, **kw)
    return q.cuda(), _cache_to(cache, "cuda"), kb.cuda(), vb.cuda()


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("d", [64, 72, 80, 96, 128, 256])
@pytest.mark.parametrize("page", [16, 32, 64, 128, 256])
def test_gpu_head_dims_pages(d, page):
    """Every head dim and page size through the default path (on SM90, pages of 16 and 32
    tokens: 64-key tiles loaded as four or two boxes by the Gluon kernel)."""
    gen = torch.Generator().manual_seed(d * 1000 + page)
    case = _gpu_case(3, 7, 8, 2, d, page, [700, 1023, 33], 512, dtype=torch.bfloat16, gen=gen,
                     poison_unreachable=True)
    run_and_check(*case, causal=False, window=512, tol=1e-2, lse_tol=2e-2)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("b", [1, 2, 7, 16])
@pytest.mark.parametrize("causal,window", [(False, 64), (True, 64), (True, None), (False, None)])
def test_gpu_blocks_masks(b, causal, window):
    gen = torch.Generator().manual_seed(b * 10 + causal)
    case = _gpu_case(3, b, 16, 2, 128, 16, [300, 5, 64], window, dtype=torch.bfloat16, gen=gen,
                     poison_unreachable=True)
    run_and_check(*case, causal=causal, window=window, tol=1e-2, lse_tol=2e-2)


@pytest.mark.gpu
@gpu
def test_gpu_fp32_splits():
    gen = torch.Generator().manual_seed(4)
    case = _gpu_case(2, 7, 16, 4, 128, 64, [5000, 3000], 4096, gen=gen, poison_unreachable=True)
    for s in (1, 2, 7, 16):
        cfg = Config(block_m=128, block_n=64, num_splits=s, num_warps=8, num_stages=2)
        run_and_check(*case, causal=False, window=4096, config=cfg, tol=1e-5)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("window", [4096, None])
def test_gpu_long_context(window):
    """131k+ context: full attention reads all of it, a window only its last W-1 keys."""
    gen = torch.Generator().manual_seed(131)
    case = _gpu_case(2, 7, 16, 2, 128, 64, [131_200, 70_001], window, dtype=torch.bfloat16, gen=gen,
                     poison_unreachable=True)
    run_and_check(*case, causal=False, window=window, tol=1e-2, lse_tol=2e-2)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("cfg", TMA_CONFIGS[:2] + [GLUON_CFG, GLUON_SPLIT_CFG], ids=["auto", "tma128", "gluon", "gluon_s9"])
def test_gpu_cuda_graph(cfg):
    """Capture once, then change q and ctx_lens in place and replay: same as the oracle."""
    gen = torch.Generator().manual_seed(77)
    q, cache, kb, vb = _gpu_case(3, 7, 64, 4, 128, 64, [5000, 4000, 10], 4096, dtype=torch.bfloat16, gen=gen)
    if cfg is not None and cfg.gluon and not _gluon_fits((q, cache, kb, vb)):
        pytest.skip("the Gluon kernel needs an SM90 GPU and Gluon's Hopper API")
    mask = MaskSpec(causal=False, window=4096)
    scale = 128 ** -0.5
    triton_window_block(q, cache, kb, vb, mask, scale, return_lse=True, config=cfg)  # compile outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = triton_window_block(q, cache, kb, vb, mask, scale, return_lse=True, config=cfg)
    for ctx in ([5000, 4000, 10], [5003, 4001, 0], [6000, 100, 4096]):
        q.copy_(torch.randn_like(q))
        cache.ctx_lens.copy_(torch.tensor(ctx, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        ref, ref_lse = oracle(q, cache.k_pages, cache.v_pages, cache.block_table, cache.ctx_lens,
                              kb, vb, False, 4096, scale)
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
        assert (lse.double() - ref_lse).abs().max().item() < 2e-2


# ----------------------------------------------------------------------------- per-rank shapes (issue 35)
# TensorRT-LLM shards the MiniMax drafter's attention per rank: ``64 // tp`` query heads and
# ``ceil(4 / tp)`` KV heads (KV duplicated past 4 ranks): TP 1 64 / 4, TP 2 32 / 2, TP 4 16 / 1,
# TP 8 8 / 1; head dim 128, block 7, window 4096 (two-sided). Pools: its default 32-token pages
# (HND blocks) and the VANILLA dense arena ``[slots, L, max_ctx + block, Hkv, D]`` (one page of
# any length a slot, read in place as ``arena[:, layer]``).

def per_rank_heads(tp):
    """(query heads, KV heads) a rank holds at tensor parallelism ``tp`` (TensorRT-LLM's rule)."""
    return 64 // tp, max(1, -(-4 // tp))


def make_arena_case(n_seq, b, hq, hkv, d, capacity, ctx, window, dtype=torch.float32, device="cpu", gen=None,
                    layers=2, layer=1):
    """The VANILLA dense arena ``[slots, layers, capacity, Hkv, D]`` (one spare slot, sequences in
    shuffled slots), passed as layer ``layer``'s view with a one-column block table. NaN in the
    spare slot, at every position never written (``>= ctx``) and at every stored position no
    query's window reaches."""
    slots = n_seq + 1
    kw = dict(dtype=dtype, device=device)
    k = torch.randn(slots, layers, capacity, hkv, d, generator=gen, **kw)
    v = torch.randn(slots, layers, capacity, hkv, d, generator=gen, **kw)
    slot_of = torch.randperm(slots, generator=gen, device=device)[:n_seq].to(torch.int32)
    spare = [s for s in range(slots) if s not in set(slot_of.tolist())][0]
    k[spare] = v[spare] = float("nan")
    for n, c in enumerate(ctx):
        s = int(slot_of[n])
        k[s, layer, c:] = v[s, layer, c:] = float("nan")
        if window:
            lo = max(0, c - (window - 1))
            k[s, layer, :lo] = v[s, layer, :lo] = float("nan")
    q = torch.randn(n_seq, b, hq, d, generator=gen, **kw)
    kb = torch.randn(n_seq, b, hkv, d, generator=gen, **kw)
    vb = torch.randn(n_seq, b, hkv, d, generator=gen, **kw)
    cache = PagedKV(k[:, layer], v[:, layer], slot_of[:, None],
                    torch.tensor(ctx, dtype=torch.int32, device=device))
    assert cache.k_pages.data_ptr() == k[:, layer].data_ptr()  # in place: a view, no copy
    return q, cache, kb, vb


HEAD_RATIOS = [(32, 2), (16, 1), (8, 1)]  # G = 16 with two KV heads, 16 with one, 8 with one (TP 2 / 4 / 8, scaled)


@pytest.mark.parametrize("hq,hkv", HEAD_RATIOS, ids=lambda x: str(x))
@interp_test
def test_interp_per_rank_head_ratios_paged(hq, hkv):
    """The per-rank head ratios on small pages, a block of 7 (B * G up to 112 rows), mixed and
    wrapped contexts, NaN wherever the mask cannot reach."""
    gen = torch.Generator().manual_seed(hq * 10 + hkv)
    case = make_case(4, 7, hq, hkv, 16, P, [0, 5, 2 * W + 3, 41], W, gen=gen, poison_unreachable=True)
    run_and_check(*case, causal=False, window=W, tol=1e-4)


@pytest.mark.parametrize("hq,hkv", HEAD_RATIOS, ids=lambda x: str(x))
@interp_test
def test_interp_per_rank_head_ratios_dense_arena(hq, hkv):
    """The per-rank head ratios on the dense arena of an odd capacity (37 = max_ctx 30 + block 7),
    read in place: contexts 0, short, past the window and the full max_ctx."""
    gen = torch.Generator().manual_seed(7 + hq + hkv)
    case = make_arena_case(4, 7, hq, hkv, 16, 37, [0, 3, 19, 30], 12, gen=gen)
    run_and_check(*case, causal=False, window=12, tol=1e-4)


def test_gluon_one_box_a_tile_on_one_page_a_sequence():
    """With one page a sequence (the dense arena), a page of any length takes one box a tile;
    a ring of pages of that length would take boxes too small to load (the Triton kernel then)."""
    from draftsmith.lowering.gluon_window_block import MIN_SUB_ROWS, TILE, sub_rows

    for cap in (37, 4103, 8199, 32775):
        assert sub_rows(cap, TILE, one_page=True) == TILE
        assert sub_rows(cap, TILE) < MIN_SUB_ROWS
    assert sub_rows(32, TILE, one_page=True) == TILE and sub_rows(32, TILE) == 32


PER_RANK_CTX = {1: [32768], 16: [32768, 4096, 4095, 4103, 5003, 1000, 299, 64, 63, 1, 0, 32760, 8192, 12345, 700,
                                 4097]}


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize("pool", ["pages32", "arena"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_gpu_per_rank_shapes(tp, pool, batch):
    """The MiniMax drafter's per-rank attention at TP ``tp`` (``per_rank_heads``), bf16, through
    the default dispatch, on TensorRT-LLM's 32-token HND pages and on the VANILLA dense arena
    (capacity 32768 + 7), contexts up to 32768; outputs poisoned; against the float64 oracle.
    On SM90 with Gluon every case must take the Gluon kernel."""
    from draftsmith.lowering.triton_window_block import choose_config

    hq, hkv = per_rank_heads(tp)
    ctx = PER_RANK_CTX[batch]
    gen = torch.Generator(device="cuda").manual_seed(tp * 100 + batch + (pool == "arena"))
    if pool == "arena":
        case = make_arena_case(batch, 7, hq, hkv, 128, 32768 + 7, ctx, 4096, dtype=torch.bfloat16, device="cuda",
                               gen=gen)
    else:
        case = _gpu_case(batch, 7, hq, hkv, 128, 32, ctx, 4096, dtype=torch.bfloat16,
                         gen=torch.Generator().manual_seed(tp + batch), poison_unreachable=True, layout="hnd")
    if _gluon_here():
        assert _gluon_fits(case), f"TP {tp} on {pool}: the Gluon kernel must take it"
        assert choose_config(batch, 7, hq, hkv, 128, 4095, case[0].device, gluon_ok=True).gluon
    run_and_check(*case, causal=False, window=4096, tol=1e-2, lse_tol=2e-2)


def test_tma_tiles_of_float32_fit_the_shared_memory(monkeypatch):
    """Float32 TMA tiles take fewer stages than bf16 ones: five stages of 64-key float32 K and V
    tiles (328 KB) do not fit an H200's 227 KB (the dense arena's float32 GPU test hit it)."""
    from draftsmith.lowering import jit
    from draftsmith.lowering import triton_window_block as twb

    dev = torch.device("cuda", 0)
    monkeypatch.setitem(jit._SM_COUNT, 0, 132)
    bf16 = twb.choose_config(2, 7, 16, 1, 128, 4095, dev, tma_ok=True)
    f32 = twb.choose_config(2, 7, 16, 1, 128, 4095, dev, tma_ok=True, elt_bytes=4)
    assert bf16.num_stages == 5 and f32.num_stages == twb.TUNED["tma_stages_4byte"][0] == 2
    smem = lambda c, elt: 2 * c.num_stages * c.block_n * 128 * elt  # noqa: E731  (K and V ring)
    assert smem(f32, 4) <= 227 * 1024 < smem(bf16, 4)
