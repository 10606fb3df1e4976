"""Issue 17, point 9 on TensorRT-LLM's *paged* context pool (CONTRACT.md R11): under the paged
DFlash backends (TRTLLM, FA4, XQA) the worker hands ``dflash_forward`` ``ctx_kv_cache`` (the
private arena ``[L, pages, 2, nkv, P, hd]`` or the draft KV cache manager's per-layer
``get_buffers(layer, "HND")`` views over a page-major pool) and ``ctx_page_table``; the emitted
class reads that pool in place through each layer's lowering and drafts the oracle's tokens.

The serving process runs the emitted class; the worker process (never imported the package)
runs the stand-in's own TensorRT-LLM forward over the same pools, which checks the stand-in's
pool and kernel semantics against the same oracle."""

import pytest
from harness import assert_matches_oracle, one_line

PAGED_RUNS = ["TRTLLM", "TRTLLM:arena", "FA4", "XQA"]
ENGINE_LOWERINGS = {"trtllm_gen"}


def _noncausal_windowed(case):
    return [i for i, l in enumerate(case.layers) if not l["causal"] and l["window"] is not None]


def _check_pool(case, run, out):
    backend, _, pool = run.partition(":")
    want = "arena" if backend == "FA4" or pool == "arena" else "managed"
    got = out["pool"]
    assert got["pool"] == want, f"{case.adapter} {run}: drafted over the {got['pool']} pool, expected {want}"
    if want == "managed":  # a V1 view: the page stride spans every layer of the pool
        layers = len(case.layers)
        cfg = case.config
        one = 2 * cfg["num_key_value_heads"] * got["page_size"] * cfg["head_dim"]
        assert got["layer_stride0"] == layers * one and got["divisor"] == 2 * layers, got
        pages = got["table"][1]
        assert pages != sorted(pages) or pages[0] != 0, f"{case.adapter}: the block table is trivially ordered"


@pytest.mark.builds_drafter
def test_emitted_forward_reads_the_paged_pool_in_place(kind_case):
    case = kind_case  # one adapter per drafter kind: the same emitted code for every adapter of a kind
    res = case.drive("serve", backends=PAGED_RUNS)
    engine_layers = sum(1 for l in case.layers if l["lowering"]["cpu"] in ENGINE_LOWERINGS)
    for run in PAGED_RUNS:
        out = res["backends"][run]
        assert "build" not in out, f"{case.adapter} {run}: {out['build']['error']}"
        if run.startswith("TRTLLM") and _noncausal_windowed(case):
            err = out.get("decode") or {}
            assert err.get("type") == "ValueError" and one_line(err["message"]) and "TRTLLM" in err["message"], (
                f"{case.adapter} {run}: non-causal windowed layers must be refused by TensorRT-LLM's "
                f"validate_block_attention_windows, got {err or 'a draft'}")
            continue
        assert_matches_oracle(case, out, f"serving process, {run} paged pool")
        _check_pool(case, run, out)
        assert out["engine_attention_calls"] == engine_layers, (
            f"{case.adapter} {run}: TensorRT-LLM's own attention ran {out['engine_attention_calls']} times; "
            f"the spec's cpu lowerings name it for {engine_layers} layers")


@pytest.mark.builds_drafter
def test_standin_trtllm_forward_over_the_same_pools_matches_the_oracle(kind_case):
    case = kind_case  # one adapter per drafter kind: the same emitted code for every adapter of a kind
    """The built-in class (a worker process, one build per process as in a deployment) through
    the stand-in's own paged kernels: the pools the emitted class is checked on, and their
    semantics, are TensorRT-LLM's, not ours."""
    arch = case.serve().get("exported_arch_modules") or {}
    runs = ["FA4"] if _noncausal_windowed(case) else ["FA4", "TRTLLM"]
    for run in runs:
        out = case.drive("worker", arch_modules=arch, backends=[run])["backends"][run]
        assert "build" not in out, f"{case.adapter} worker {run}: {out['build']['error']}"
        assert out["drafter_class"] in ("DFlashForCausalLM", "GQADSparkForCausalLM"), out["drafter_class"]
        assert_matches_oracle(case, out, f"worker process, {run} paged pool")
        _check_pool(case, run, out)
        assert out["engine_attention_calls"] == len(case.layers)
