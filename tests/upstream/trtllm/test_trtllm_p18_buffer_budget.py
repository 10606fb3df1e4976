"""The converted config and the snippet's ``max_draft_len`` through TensorRT-LLM's own config-time
check (excerpt: amukkara ``speculative/dflash.py`` @ d70a2287 ``validate_dflash_ctx_buffer_budget``,
``compute_dflash_ctx_buffer_bytes``): no "narrower than trained" warning, the token budget and the
per-rank pool size computed from the converted config's geometry (KV heads per rank
``ceil(kv / tp)``, as the TP test's ranks hold them)."""

import pytest
import yaml

import excerpts


@pytest.fixture(scope="module")
def worker():
    excerpts.require()
    ld = excerpts.loader()
    return ld, ld.worker()


@pytest.mark.parametrize("tp", [1, 4])
def test_converted_config_passes_the_config_time_checks(case, worker, tp):
    ld, wk = worker
    snip = yaml.safe_load((case.package() / "speculative_config.yaml").read_text())["speculative_config"]
    k = snip["max_draft_len"]
    ld.LOG.records.clear()
    wk["validate_dflash_ctx_buffer_budget"](max_batch_size=4, max_num_tokens=4 * (1 + k), max_seq_len=64,
                                            max_draft_len=k, attention_backend="VANILLA",
                                            draft_config=case.config, tp_size=tp, memory_budget_bytes=1 << 40)
    assert not ld.LOG.warnings("below the drafter's trained width"), ld.LOG.warnings()
    with pytest.raises(ValueError, match="exceeds max_num_tokens"):
        wk["validate_dflash_ctx_buffer_budget"](max_batch_size=4, max_num_tokens=4 * (1 + k) - 1, max_seq_len=64,
                                                max_draft_len=k, attention_backend="VANILLA",
                                                draft_config=case.config, tp_size=tp)
    d = case.config["draftsmith"]["dims"]
    want = 2 * 5 * d["num_layers"] * (64 + k + 1) * ((d["kv_heads"] + tp - 1) // tp) * d["head_dim"] * 2
    with pytest.raises(ValueError, match="pooled-context K/V buffers") as e:
        wk["validate_dflash_ctx_buffer_budget"](max_batch_size=4, max_num_tokens=None, max_seq_len=64,
                                                max_draft_len=k, attention_backend="VANILLA",
                                                draft_config=case.config, tp_size=tp, memory_budget_bytes=want - 1)
    assert f"x {(d['kv_heads'] + tp - 1) // tp} x {d['head_dim']} x 2." in str(e.value), str(e.value)
