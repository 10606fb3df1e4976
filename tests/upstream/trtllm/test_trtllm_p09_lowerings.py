"""Point 9 (lowerings inside TensorRT-LLM): the emitted class runs each layer's block attention
through the spec's lowering inside ``dflash_forward`` -- TensorRT-LLM's own attention op runs
only where the spec names it -- and drafts the oracle's tokens (CONTRACT.md R9)."""

from harness import stage_error

ENGINE_LOWERINGS = {"trtllm_gen"}  # the spec's name for TensorRT-LLM's own kernel


def test_spec_lowerings_replace_the_engine_attention_on_this_device(case):
    out = case.serve()["backends"]["VANILLA"]
    problem = stage_error(out)
    assert problem is None, f"{case.adapter}: {problem}"
    on_cpu = [l["lowering"]["cpu"] for l in case.layers]
    engine_layers = sum(1 for n in on_cpu if n in ENGINE_LOWERINGS)
    assert out["engine_attention_calls"] == engine_layers, (
        f"{case.adapter}: TensorRT-LLM's own block attention ran {out['engine_attention_calls']} times "
        f"in one draft step; the spec names draftsmith lowerings {on_cpu} for this device, so it "
        f"must run {engine_layers} times")
