"""The ``tensorrt_llm`` the emit tests import: the conformance suite's import shim
(``tests/conformance/trtllm/shim/tensorrt_llm``, CONTRACT.md), one package for every test.

TensorRT-LLM's own excerpts (``$DRAFTSMITH_TRTLLM_SRC``, executed through their ``loader.py``) where
they cover a name; every other module falls through to the transcriptions in
``tests/conformance/trtllm/standin/tensorrt_llm`` (one file per TensorRT-LLM module, each naming
repository, path and commit). Nothing here defines a TensorRT-LLM object.

The shim is imported once per process; :func:`fake_trtllm` restores its registries after each test.
Tests of the shim's building blocks as the emit tests use them are at the bottom.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

CONFORMANCE = Path(__file__).resolve().parent / "conformance" / "trtllm"
SHIM = CONFORMANCE / "shim"
_REGISTRIES = ("MODEL_CLASS_MAPPING", "DRAFT_MODEL_BUILDER_MAPPING", "_EXTERNAL_ARCH_TO_MODULE", "_MODULE_REGISTRATIONS")


def _excerpts():
    if str(CONFORMANCE) not in sys.path:
        sys.path.insert(0, str(CONFORMANCE))
    import excerpts

    excerpts.require()  # skips in one line naming DRAFTSMITH_TRTLLM_SRC
    return excerpts


def loader():
    """The excerpts' ``loader`` module (skips when ``$DRAFTSMITH_TRTLLM_SRC`` is absent)."""
    return _excerpts().loader()


def shim() -> types.SimpleNamespace:
    """Imports the shim ``tensorrt_llm`` (once per process) and returns handles to its objects."""
    _excerpts()
    mod = sys.modules.get("tensorrt_llm")
    if mod is not None and not str(getattr(mod, "__file__", "")).startswith(str(SHIM)):
        raise RuntimeError(f"another tensorrt_llm is imported ({getattr(mod, '__file__', mod)}), not the shim")
    if str(SHIM) not in sys.path:
        sys.path.insert(0, str(SHIM))
    import tensorrt_llm  # noqa: F401  (the shim)
    from tensorrt_llm import _excerpts as ex
    from tensorrt_llm._torch.model_config import ModelConfig
    from tensorrt_llm._torch.models import modeling_dflash, modeling_dspark  # noqa: F401  (builders registered)
    from tensorrt_llm._torch.models import modeling_utils as registry
    from tensorrt_llm._torch.modules import embedding, linear
    from tensorrt_llm._torch.speculative.interface import SpeculativeDecodingMode
    from tensorrt_llm.mapping import Mapping

    return types.SimpleNamespace(
        ld=ex.ld, mu_ns=ex.mu, df=ex.df, ds=ex.ds, registry=registry, Linear=linear.Linear, Mapping=Mapping,
        TP=linear.TensorParallelMode, WeightMode=linear.WeightMode, Embedding=embedding.Embedding,
        LMHead=embedding.LMHead, MODEL_CLASS_MAPPING=registry.MODEL_CLASS_MAPPING,
        BUILDERS=registry.DRAFT_MODEL_BUILDER_MAPPING, ModelConfig=ModelConfig, Mode=SpeculativeDecodingMode)


@pytest.fixture
def fake_trtllm(monkeypatch):
    """The shim for one test: its registries as before the test afterwards; yields the handles."""
    from draftsmith.framework.emit import runtime

    ns = shim()
    saved = {name: dict(getattr(ns.registry, name)) for name in _REGISTRIES}
    monkeypatch.setattr(runtime, "_INSTALLED", {})
    try:
        yield ns
    finally:
        for name, content in saved.items():
            reg = getattr(ns.registry, name)
            reg.clear()
            reg.update(content)


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
