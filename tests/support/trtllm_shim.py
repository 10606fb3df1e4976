"""The ``tensorrt_llm`` the emit tests import: the conformance suite's import shim
(``tests/upstream/trtllm/shim/tensorrt_llm``, CONTRACT.md), one package for every test.

TensorRT-LLM's own excerpts (``$DRAFTSMITH_TRTLLM_SRC``, executed through their ``loader.py``) where
they cover a name; every other module falls through to the transcriptions in
``tests/upstream/trtllm/standin/tensorrt_llm`` (one file per TensorRT-LLM module, each naming
repository, path and commit). Nothing here defines a TensorRT-LLM object.

The shim is imported once per process; :func:`fake_trtllm` restores its registries after each test.
Tests of the shim's building blocks as the emit tests use them: tests/emit/test_emit_trtllm_fake.py.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

CONFORMANCE = Path(__file__).resolve().parents[1] / "upstream" / "trtllm"
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
