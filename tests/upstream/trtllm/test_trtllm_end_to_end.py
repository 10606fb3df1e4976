"""The whole call sequence in the serving process, under each backend: builder -> __init__ ->
load_weights(weights=..., weight_mapper=...) -> load_weights_from_target_model -> per-layer
_resolve_block_attention -> one block decode -> the float64 oracle's logits and tokens
(CONTRACT.md R1, R2, R9)."""

import pytest
import torch

from harness import CONTEXT, assert_matches_oracle, expected_mask, mask_matrix


@pytest.mark.builds_drafter
def test_serving_process_masks_and_draft_match_the_reference(kind_case):
    case = kind_case  # one adapter per drafter kind: the same emitted code for every adapter of a kind
    res = case.serve()
    b = case.config["dflash_config"]["block_size"]
    noncausal_windowed = any(not l["causal"] and l["window"] is not None for l in case.layers)
    for backend, out in res["backends"].items():
        assert "build" not in out, f"{case.adapter} {backend}: {out['build']['error']}"
        for i, layer in enumerate(case.layers):
            causal, (left, right) = out["resolved"][i]
            assert torch.equal(mask_matrix(causal, left, right, CONTEXT, b), expected_mask(layer, CONTEXT, b)), (
                f"{case.adapter} {backend}: layer {i} resolves to causal={causal} ({left}, {right})")
        if backend == "TRTLLM" and noncausal_windowed:
            continue  # refused at validation (test_trtllm_p03_refusals)
        assert_matches_oracle(case, out, f"serving process, {backend}")
