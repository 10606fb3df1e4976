"""Fixtures of the TensorRT-LLM conformance suite: one ``Case`` per adapter YAML, per session. A test
marked ``builds_drafter`` (it builds the excerpt's drafter and drafts) skips the adapters another
suite drives (``harness.DRIVEN_ELSEWHERE``)."""

import pytest

from harness import ADAPTERS, DRIVEN_ELSEWHERE, EMIT_REFUSED, KIND_REPRESENTATIVES, get_case


@pytest.fixture(params=ADAPTERS)
def case(request, tmp_path_factory):
    if request.param in EMIT_REFUSED:  # refused by `draftsmith emit` in one line (test_trtllm_p03_refusals)
        pytest.skip(f"{request.param}: emit refuses it: {EMIT_REFUSED[request.param]}")
    if request.param in DRIVEN_ELSEWHERE and request.node.get_closest_marker("builds_drafter"):
        pytest.skip(f"{request.param}: {DRIVEN_ELSEWHERE[request.param]}")
    return get_case(request.param, tmp_path_factory)


@pytest.fixture(params=sorted(KIND_REPRESENTATIVES))
def kind_case(request, tmp_path_factory):
    """``case`` for one adapter per drafter kind (family, with heads): tests whose subject is the same
    code in every emitted package (harness.KIND_REPRESENTATIVES lists whom each stands for)."""
    if request.param in DRIVEN_ELSEWHERE and request.node.get_closest_marker("builds_drafter"):
        pytest.skip(f"{request.param}: {DRIVEN_ELSEWHERE[request.param]}")
    return get_case(request.param, tmp_path_factory)
