"""Fixtures of the TensorRT-LLM conformance suite: one ``Case`` per adapter YAML, per session."""

import pytest

from harness import ADAPTERS, DRIVEN_ELSEWHERE, EMIT_REFUSED, KIND_REPRESENTATIVES, get_case


#: the tests that build the excerpt's drafter (TensorRT-LLM's ``DFlashForCausalLM`` or ours on it) and draft
BUILDS_THE_DRAFTER = frozenset({
    "test_serving_process_masks_and_draft_match_the_reference", "test_worker_process_drafts_the_oracle_tokens",
    "test_package_survives_a_changed_and_moved_adapter_file", "test_emitted_forward_reads_the_paged_pool_in_place",
    "test_standin_trtllm_forward_over_the_same_pools_matches_the_oracle",
    "test_emitted_drafter_builds_on_the_excerpted_class", "test_trtllm_backend_refusal_is_tensorrt_llms",
    "test_builtin_classes_resolve_the_trained_masks", "test_builtin_worker_drafts_the_trained_slots",
    "test_every_rank_drafts_the_tp1_and_oracle_tokens",
})


@pytest.fixture(params=ADAPTERS)
def case(request, tmp_path_factory):
    if request.param in EMIT_REFUSED:  # refused by `draftsmith emit` in one line (test_trtllm_p03_refusals)
        pytest.skip(f"{request.param}: emit refuses it: {EMIT_REFUSED[request.param]}")
    if request.param in DRIVEN_ELSEWHERE and request.function.__name__ in BUILDS_THE_DRAFTER:
        pytest.skip(f"{request.param}: {DRIVEN_ELSEWHERE[request.param]}")
    return get_case(request.param, tmp_path_factory)


@pytest.fixture(params=sorted(KIND_REPRESENTATIVES))
def kind_case(request, tmp_path_factory):
    """``case`` for one adapter per drafter kind (family, with heads): tests whose subject is the same
    code in every emitted package (harness.KIND_REPRESENTATIVES lists whom each stands for)."""
    if request.param in DRIVEN_ELSEWHERE and request.function.__name__ in BUILDS_THE_DRAFTER:
        pytest.skip(f"{request.param}: {DRIVEN_ELSEWHERE[request.param]}")
    return get_case(request.param, tmp_path_factory)
