"""Fixtures of the TensorRT-LLM conformance suite: one ``Case`` per adapter YAML, per session."""

import pytest

from harness import ADAPTERS, Case

_CASES = {}


@pytest.fixture(params=ADAPTERS)
def case(request, tmp_path_factory):
    name = request.param
    if name not in _CASES:
        _CASES[name] = Case(name, tmp_path_factory.mktemp(f"trtllm-{name}"))
    return _CASES[name]
