"""Fixtures of the TensorRT-LLM conformance suite: one ``Case`` per adapter YAML, per session."""

import pytest

from harness import ADAPTERS, get_case


@pytest.fixture(params=ADAPTERS)
def case(request, tmp_path_factory):
    return get_case(request.param, tmp_path_factory)
