"""Point 1 (backbone): the class registered under the drafter architecture builds in the pinned
TensorRT-LLM and computes the same context and block keys (CONTRACT.md R1)."""

from harness import stage_error


def test_backbone_builds_and_context_keys_equal_block_keys(case):
    res = case.serve()
    assert res["import"] == {"ok": True}, f"{case.adapter}: the package does not import: {res['import'].get('error')}"
    out = res["backends"]["VANILLA"]
    problem = stage_error({k: v for k, v in out.items() if k in ("build", "load")})
    assert problem is None, f"{case.adapter}: the drafter does not build/load in the serving process: {problem}"
    worst = max(out["kv_agreement"])
    assert worst < 1e-4, (
        f"{case.adapter}: precompute_context_kv (k_norm applied as rms(k)*w) and the block path's "
        f"k_norm disagree by {worst:.3g} per layer {out['kv_agreement']}: the backbone's k_norm must "
        "compute what the converted k_norm weight means to precompute_context_kv")
