"""Fixtures of the TensorRT-LLM conformance suite: one ``Case`` per adapter YAML, per session."""

import pytest

from harness import ADAPTERS, EMIT_REFUSED, get_case


@pytest.fixture(params=ADAPTERS)
def case(request, tmp_path_factory):
    if request.param in EMIT_REFUSED:  # refused by `draftsmith emit` in one line (test_trtllm_p03_refusals)
        pytest.skip(f"{request.param}: emit refuses it: {EMIT_REFUSED[request.param]}")
    return get_case(request.param, tmp_path_factory)
