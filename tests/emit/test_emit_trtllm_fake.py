"""Tests of the shim's building blocks (``support.trtllm_shim``) as the emit tests use them."""

from __future__ import annotations

import pytest
import torch

from support.trtllm_shim import fake_trtllm  # noqa: F401  (fixture)


# ------------------------------------------------------------------------- tests of the shim's blocks


def test_linear_shards_and_the_excerpt_weight_mode_dispatches(fake_trtllm):
    ns = fake_trtllm
    m = ns.Mapping(world_size=2, rank=1, tp_size=2)
    lin = ns.Linear(4, 6, bias=False, mapping=m, tensor_parallel_mode=ns.TP.COLUMN)
    assert lin.weight.shape == (3, 4)
    w = torch.arange(24.0).view(6, 4)
    lin.load_weights([{"weight": w}])
    assert torch.equal(lin.weight, w[3:])
    with pytest.raises(AssertionError):  # a VANILLA module handed q, k, v (issue 34 item 3)
        lin.load_weights([{"weight": w}] * 3)


def test_embedding_column_splits_the_vocabulary_as_lm_head_does(fake_trtllm):
    """embedding.py @ 06d0733f: COLUMN ``Embedding`` / ``LMHead`` keep ``ceil(vocab / tp)`` rows of the
    full hidden size (so a tied ``lm_head`` shares the tensor); attention DP drops the TP mode."""
    ns = fake_trtllm
    m = ns.Mapping(world_size=4, rank=2, tp_size=4)
    emb = ns.Embedding(16, 8, mapping=m, tensor_parallel_mode=ns.TP.COLUMN)
    head = ns.LMHead(16, 8, mapping=m, tensor_parallel_mode=ns.TP.COLUMN)
    assert emb.weight.shape == head.weight.shape == (4, 8)
    assert (emb.vocab_start_index, emb.vocab_end_index, emb.tp_mode) == (8, 12, ns.TP.COLUMN)
    adp = ns.Embedding(16, 8, mapping=ns.Mapping(world_size=4, rank=2, tp_size=4, enable_attention_dp=True),
                       tensor_parallel_mode=ns.TP.COLUMN)
    assert adp.tp_mode is None and adp.weight.shape == (16, 8)
    one = ns.Embedding(16, 8)
    one.weight.data = torch.randn(16, 8)
    ids = torch.tensor([[3, 15]])
    assert torch.equal(one(ids), one.weight[ids])
