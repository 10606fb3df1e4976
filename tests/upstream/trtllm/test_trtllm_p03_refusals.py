"""Point 3 (refusals): ``validate_block_attention_windows`` keeps TensorRT-LLM's contract
(returns None; raises its one-line ValueError for non-causal windowed layers under TRTLLM)
(CONTRACT.md R3)."""

from harness import one_line


def test_validate_block_attention_windows_keeps_trtllm_refusals(case):
    res = case.serve()["backends"]
    noncausal_windowed = [i for i, l in enumerate(case.layers) if not l["causal"] and l["window"] is not None]
    for backend in ("VANILLA", "TRTLLM"):
        out = res[backend]
        assert "build" not in out, f"{case.adapter} {backend}: {out['build']['error']}"
        v = out["validate"]
        if backend == "TRTLLM" and noncausal_windowed:
            assert v.get("type") == "ValueError", (
                f"{case.adapter} TRTLLM: layers {noncausal_windowed} are non-causal windowed; "
                f"TensorRT-LLM's validate_block_attention_windows raises ValueError, got {v}")
            assert one_line(v["message"]) and "TRTLLM" in v["message"], v["message"]
        else:
            assert v == {"returned": "None"}, (
                f"{case.adapter} {backend}: validate_block_attention_windows must return None "
                f"(TensorRT-LLM's contract), got {v}")
