"""Point 2 (other processes): a worker process that never imported the package builds a drafter
with the right per-layer masks and drafts the oracle's tokens (CONTRACT.md R2)."""

import pytest
import torch

from harness import CONTEXT, assert_matches_oracle, expected_mask, mask_matrix


def test_worker_process_resolves_the_trained_masks(case):
    res = case.worker()
    assert res["package_imported_before_build"] is False
    out = res["backends"]["VANILLA"]
    assert "build" not in out, f"{case.adapter} worker: {out['build']['error']}"
    b = case.config["dflash_config"]["block_size"]
    for i, layer in enumerate(case.layers):
        causal, (left, right) = out["resolved"][i]
        got = mask_matrix(causal, left, right, CONTEXT, b)
        want = expected_mask(layer, CONTEXT, b)
        assert torch.equal(got, want), (
            f"{case.adapter} worker ({out['drafter_class']}): layer {i} resolves to "
            f"causal={causal} window=({left}, {right}); the drafter was trained with "
            f"causal={layer['causal']} window={layer['window']}")


@pytest.mark.builds_drafter
def test_worker_process_drafts_the_oracle_tokens(case):
    out = case.worker()["backends"]["VANILLA"]
    assert_matches_oracle(case, out, "worker process, VANILLA")
