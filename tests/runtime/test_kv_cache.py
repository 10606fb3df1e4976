"""The paged ring KV cache: ring sizing, wrap-around, long streamed contexts in bounded memory."""

from __future__ import annotations

import math

import pytest
import torch

from draftsmith.framework.runtime.kv_cache import PagedKVCache, ring_pages
from draftsmith.lowering.base import MaskSpec
from support.host_case import (HKV, D, W, assert_matches, build, make_config, make_target, make_weights,
                       rand_hidden, ref_draft)


@pytest.mark.parametrize("page", [1, 16, 64])
def test_ring_pages(page):
    assert ring_pages(W, page, None) == math.ceil((W - 1) / page) + 1
    assert ring_pages(None, page, 1000) == math.ceil(1000 / page)
    with pytest.raises(ValueError, match="max_context"):
        ring_pages(None, page, None)


@pytest.mark.parametrize("page", [1, 16, 64])
def test_write_wraps_and_keeps_window(page):
    g = torch.Generator().manual_seed(page)
    masks = [MaskSpec(False, 6), MaskSpec(True, None)]
    cache = PagedKVCache(masks, num_seqs=2, num_kv_heads=HKV, head_dim=D, page_size=page, max_context=300)
    k_all = torch.randn(300, HKV, D, generator=g)
    v_all = torch.randn(300, HKV, D, generator=g)
    # sequence 1 first gets 250 tokens in pieces smaller than the window; sequence 0 stays at 7
    for a in range(0, 250, 5):
        for l in range(2):
            cache.write(l, 1, a, k_all[a:a + 5], v_all[a:a + 5])
        cache.advance(1, 5)
    for l in range(2):
        cache.write(l, 0, 0, k_all[:7] + 1, v_all[:7] + 1)
    cache.advance(0, 7)
    ring = cache.view(0)
    assert ring.oldest(1) <= 250 - 5 and ring.block_table.shape == (2, ring_pages(6, page, None))
    k, v = ring.gather(1, 245, 250)
    assert torch.equal(k, k_all[245:250]) and torch.equal(v, v_all[245:250])
    k, _ = ring.gather(0, 2, 7)
    assert torch.equal(k, k_all[2:7] + 1)
    full = cache.view(1)
    k, _ = full.gather(1, 0, 250)
    assert torch.equal(k, k_all[:250])
    assert cache.ctx_lens.tolist() == [7, 250]
    with pytest.raises(ValueError, match="max_context"):
        cache.write(1, 1, cache.capacity(1) - 2, k_all[:5], v_all[:5])


def test_pool_bytes():
    masks = [MaskSpec(False, 4096), MaskSpec(False, None)]
    cache = PagedKVCache(masks, num_seqs=3, num_kv_heads=4, head_dim=128, page_size=64, max_context=1000,
                         dtype=torch.bfloat16)
    per_token = 2 * 4 * 128 * 2  # K and V, bf16
    assert cache.nbytes() == 3 * (ring_pages(4096, 64, None) + ring_pages(None, 64, 1000)) * 64 * per_token


class RowCounter:
    """Counts rows that go through ``fc`` (the context projection)."""

    def __init__(self, model):
        self.rows = 0
        model.fc.register_forward_hook(lambda m, i, o: setattr(self, "rows", self.rows + i[0].shape[0]))


@pytest.mark.parametrize("page", [1, 64])
def test_131k_context_window_and_full(page):
    """131072 tokens streamed in chunks into a windowed + full + windowed-causal drafter."""
    c = 131072
    config = make_config()
    weights, target = make_weights(config), make_target()
    model = build(config, weights, target)
    cache = model.make_cache(1, page_size=page, max_context=c)
    hidden = rand_hidden(c, seed=page)
    for a in range(0, c, 40000):
        model.append_context(cache, hidden[a:a + 40000], chunk=8192)
    assert cache.ctx_len(0) == c
    per_token = 2 * HKV * D * 4
    window_pages = ring_pages(W, page, None)
    assert cache.nbytes() == (2 * window_pages * page + math.ceil(c / page) * page) * per_token
    out = model.draft(torch.tensor([13]), cache)
    assert_matches(out.logits[0], out.tokens[0], out.confidence[0], ref_draft(config, weights, target, hidden, 13))


@pytest.mark.parametrize("page", [16])
def test_300k_context_windowed_bounded(page):
    """300000 tokens, generated chunk by chunk, through windowed layers: the pool stays O(W)
    and only the last W-1 tokens of each append are ever projected."""
    layers = [(False, W), (True, W)]
    config = make_config(layers=layers)
    weights, target = make_weights(config), make_target()
    model = build(config, weights, target)
    counter = RowCounter(model)
    cache = model.make_cache(2, page_size=page)  # no max_context: windowed layers need none
    assert cache.nbytes() == 2 * 2 * ring_pages(W, page, None) * page * 2 * HKV * D * 4
    c, step = 300_000, 30_000
    last = None
    for i, a in enumerate(range(0, c, step)):
        last = rand_hidden(step, seed=1000 + i)
        model.append_context(cache, last, seq=1)
    assert counter.rows == (c // step) * (W - 1)
    short = rand_hidden(4, seed=5)
    model.append_context(cache, short, seq=0)
    assert cache.ctx_lens.tolist() == [4, c]
    out = model.draft(torch.tensor([21, 34]), cache)
    ref1 = ref_draft(config, weights, target, last, 34, ctx_start=c - step)
    assert_matches(out.logits[1], out.tokens[1], out.confidence[1], ref1)
    ref0 = ref_draft(config, weights, target, short, 21)
    assert_matches(out.logits[0], out.tokens[0], out.confidence[0], ref0)


@pytest.mark.parametrize("page", [1, 16, 64])
def test_mixed_lengths_across_page_sizes(page):
    config = make_config(sfa=False, gemma=False)
    weights, target = make_weights(config, seed=3), make_target()
    model = build(config, weights, target)
    lens = [1, 5, 6, 7, 70, 200]
    cache = model.make_cache(len(lens), page_size=page, max_context=256)
    hs = [rand_hidden(n, seed=n) for n in lens]
    for i, h in enumerate(hs):
        model.append_context(cache, h, seq=i, chunk=64)
    anchors = [3, 1, 4, 1, 5, 9]
    out = model.draft(torch.tensor(anchors), cache)
    for i, (h, a) in enumerate(zip(hs, anchors)):
        assert_matches(out.logits[i], out.tokens[i], out.confidence[i], ref_draft(config, weights, target, h, a))

