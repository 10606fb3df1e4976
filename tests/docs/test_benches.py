"""Every bench in ``bench/`` runs, at a tiny size on CPU (the Triton ones under the
interpreter), so that none rots unseen: each is run as its usage line says, in a child
process, and its output is checked for what the bench exists to report."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from support.forkserver import run_script

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
# Benches not listed here are a failure of test_every_bench_is_run: add a run for a new bench.
NOT_BENCHES = {"timing.py", "reliability_report.py"}  # the shared module; the reliability report's generator


def run(script: str, *args: str, interpret: bool = False, timeout: int = 240) -> str:
    """``python bench/<script> args...`` on CPU (no GPU visible), in its own process
    (``support.forkserver``); its stdout, after checking exit 0."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    p = run_script(BENCH / script, *args, cwd=BENCH, env=env, timeout=timeout)
    assert p.returncode == 0, f"{script} exited {p.returncode}:\n{p.stderr[-3000:]}"
    return p.stdout


def triton_or_skip():
    pytest.importorskip("triton")


RUNS = {"attention.py", "read_ceiling.py", "convert.py", "draft_step.py", "many_tensors.py", "mask_effect.py",
        "train_tiny_pair.py", "train_tiny_dflash2.py", "tensor_parallel.py"}


def test_every_bench_is_run():
    benches = {p.name for p in BENCH.glob("*.py")} - NOT_BENCHES
    assert benches == RUNS, f"benches without a CPU run here: {sorted(benches - RUNS)}"


def test_attention_tiny_under_the_interpreter():
    triton_or_skip()
    out = run("attention.py", "--tiny", "--batches", "1,2", interpret=True)
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    rows = [r for r in recs if r.get("method") == "triton_window_block" and "us" in r]
    assert [r["batch"] for r in rows] == [1, 2]
    assert all(r["rel_err_vs_float64_oracle"] < 1e-2 and r["us"] > 0 for r in rows), rows
    assert any("hbm_read_TBps" in r for r in recs)  # the read ceilings, from read_ceiling.py
    assert "| triton_window_block |" in out


def test_attention_per_rank_shape_on_the_dense_arena():
    """``--tp``: the heads of one rank as TensorRT-LLM shards them (TINY's 4 / 2 at TP 2: 2 / 1);
    ``--layout arena``: the VANILLA dense arena read in place."""
    triton_or_skip()
    out = run("attention.py", "--tiny", "--tp", "2", "--layout", "arena", "--batches", "1", "--only-triton",
              interpret=True)
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    rows = [r for r in recs if r.get("method") == "triton_window_block" and "us" in r]
    assert [(r["tp"], r["Hq"], r["Hkv"], r["layout"]) for r in rows] == [(2, 2, 1, "arena")], rows
    assert rows[0]["rel_err_vs_float64_oracle"] < 1e-2
    assert "TP 2: Hq 2, Hkv 1" in out


def test_attention_full_attention_and_block_width():
    """``--full --block``: the full-attention drafter kinds' rows (``KINDS``), checked against the oracle."""
    triton_or_skip()
    out = run("attention.py", "--tiny", "--full", "--block", "5", "--batches", "1", "--only-triton", interpret=True)
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    rows = [r for r in recs if r.get("method") == "triton_window_block" and "us" in r]
    assert len(rows) == 1 and rows[0]["rel_err_vs_float64_oracle"] < 1e-2, rows
    assert "B 5, full attention" in out


@pytest.mark.parametrize("order", ["random", "sequential", "shared"])
def test_attention_page_orders_give_fa4_the_ring_caches_keys(order, monkeypatch):
    """``--page-order``: FA4's pages hold, at every position its window reads, the key and value
    the ring cache holds there (``shared``: one set of context pages for every sequence, so
    the context's K/V stay in L2); read here by indexing both page tables directly."""
    import torch

    monkeypatch.syspath_prepend(str(BENCH))
    import attention as A

    for name, value in dict(DEV="cpu", HQ=8, HKV=2, D=16, B=4, W=100, PAGE=16, FA4_PAGE=32,
                            PAGE_ORDER=order, fa4_varlen_func=lambda *a, **k: None).items():
        monkeypatch.setattr(A, name, value)
    n, ctx = 3, 333
    q, cache, kb, vb = A.make_inputs(n, ctx, seed=5, layout="trtllm", order=order)
    bt = cache.block_table.long()
    assert (bt == bt[0]).all().item() == (order == "shared")
    run = A.make_fa4(A.Dense(q, cache, kb, vb, ctx), q)
    held = {name: cell.cell_contents for name, cell in zip(run.__code__.co_freevars, run.__closure__)}
    k4, v4, table = held["k4"], held["v4"], held["table"].long()
    ring = bt.shape[1]
    for s in range(n):
        for t in range(ctx - (A.W - 1), ctx + A.B):  # the keys query ctx + B - 1's window reaches, and the block's
            page, slot = table[s, t // 32], t % 32
            if t < ctx:
                want_k = cache.k_pages[bt[s, (t // 16) % ring], t % 16]
                want_v = cache.v_pages[bt[s, (t // 16) % ring], t % 16]
            else:
                want_k, want_v = kb[s, t - ctx], vb[s, t - ctx]
            assert torch.equal(k4[page, slot], want_k) and torch.equal(v4[page, slot], want_v), (s, t)


def test_attention_oracle_error_refuses_a_nan(monkeypatch):
    """A NaN anywhere in the checked rows is an infinite error (``max`` alone would keep 0 and
    call a kernel that wrote NaN correct); an all-zero output's relative error is exactly 1."""
    import torch

    monkeypatch.syspath_prepend(str(BENCH))
    import attention as A

    for name, value in dict(DEV="cpu", HQ=8, HKV=2, D=16, B=4, W=100, PAGE=16).items():
        monkeypatch.setattr(A, name, value)
    q, cache, kb, vb = A.make_inputs(3, 333, seed=int(torch.randint(1 << 30, ())), layout="trtllm")
    dense = A.Dense(q, cache, kb, vb, 333)
    out = torch.zeros(3, A.B, A.HQ, A.D)
    assert A.oracle_error(out, dense) == pytest.approx(1.0)
    out[2, 3, 5, 7] = float("nan")
    assert A.oracle_error(out, dense) == float("inf")


def test_read_ceiling_tiny_under_the_interpreter():
    triton_or_skip()
    out = run("read_ceiling.py", "--tiny", interpret=True)
    assert "hbm_read_TBps" in out and "l2_read_TBps" in out


def test_convert_tiny(tmp_path):
    out = run("convert.py", str(tmp_path), "--scale", "tiny")
    assert "MiniMax DSpark tiny shapes" in out
    assert all(f"| {name}" in out for name in ("io floor", "draftsmith", "naive"))


def test_draft_step_tiny():
    out = run("draft_step.py", "--tiny", "--batches", "1", "--context", "100", "--iters", "2", "--device", "cpu")
    rows = [line for line in out.splitlines() if line.startswith("| 1 |")]
    assert len(rows) == 1 and "nan" not in rows[0].split("|")[2], out  # an eager time on CPU


def test_tensor_parallel_tiny_on_gloo(tmp_path):
    """TP 1 and TP 2 as gloo processes on CPU, batch 1 (+1 padded row), the MiniMax drafter (the z-lab one
    runs the same worker path in test_trtllm_p21_worker.py): every rank equal
    to TP 1 and the float64 oracle (the bench exits 1 when a rank differs), all-reduce and attention timed."""
    out = run("tensor_parallel.py", "--scale", "tiny", "--tp", "1,2", "--batches", "1", "--iters", "2",
              "--adapters", "minimax_dspark", "--workdir", str(tmp_path))
    if out.startswith("skipped:"):
        pytest.skip(out.strip())
    rec = json.loads(next(line for line in out.splitlines() if line.startswith('{"rows"')))
    assert rec["failures"] == [] and rec["oracle_seqs"] == 1, rec
    cells = {(r["adapter"], r["tp"], r["batch"]): r for r in rec["rows"]}
    assert sorted(cells) == [("minimax_dspark", tp, 1) for tp in (1, 2)], sorted(cells)
    for (adapter, tp, _), r in cells.items():
        assert r["rank_layout"] == [8 // tp, 4 // tp] and r["step_ms"] > 0 and r["attention_share"] > 0, r
        assert (r["all_reduce_share"] > 0) == (tp > 1), r
    assert "every rank equal to TP 1 and the float64 oracle" in out


def test_many_tensors_small():
    out = run("many_tensors.py", "60")
    codes = {(line.split()[0], line.split()[1]): re.search(r"exit (\d+)", line).group(1) for line in out.splitlines()
             if line.startswith(("refused", "converting"))}
    assert codes == {("refused", "inspect"): "1", ("refused", "convert"): "2",
                     ("converting", "inspect"): "0", ("converting", "convert"): "0"}, out


def test_mask_effect_one_prompt(tmp_path):
    pair = ROOT / "tests" / "fixtures" / "tiny_pair"
    prompts = tmp_path / "one.jsonl"
    prompts.write_text((pair / "prompts.jsonl").read_text().splitlines()[0] + "\n")
    out = run("mask_effect.py", "--max-new-tokens", "4", "--prompts", str(prompts))
    rows = [line for line in out.splitlines() if line.startswith("| (")]
    assert len(rows) == 6 and all(r.rstrip().endswith("| yes |") for r in rows), out  # verified: target's output


def test_train_tiny_pair_smoke(tmp_path):
    run("train_tiny_pair.py", "--out", str(tmp_path / "pair"), "--small", "--device", "cpu", "--prompts", "1",
        "--target-steps", "2", "--drafter-steps", "2")
    assert (tmp_path / "pair" / "dspark" / "config.json").is_file()
    assert len((tmp_path / "pair" / "prompts.jsonl").read_text().splitlines()) == 1
    log = json.loads((tmp_path / "pair" / "train_log.json").read_text())
    assert log["target"]["steps"] == 2 and log["drafter_train"]["steps"] == 2


# docs/dflash2-reference.md section 6, the z-lab / inco layout: the keys of z-lab/dflash
# tests/fixtures/dflash2-config.json @ 0a7587c (S8b) and its dflash_config keys.
ZLAB_DFLASH2_CONFIG_KEYS = {
    "architectures", "attention_bias", "attention_dropout", "bos_token_id", "is_causal", "dflash_config", "dtype",
    "eos_token_id", "head_dim", "hidden_act", "hidden_size", "initializer_range", "intermediate_size",
    "layer_types", "max_position_embeddings", "max_window_layers", "model_type", "num_attention_heads",
    "num_hidden_layers", "num_key_value_heads", "num_target_layers", "pad_token_id", "rms_norm_eps",
    "rope_parameters", "sliding_window", "tie_word_embeddings", "transformers_version", "use_cache",
    "use_sliding_window", "vocab_size"}
ZLAB_DFLASH2_KEYS = {"block_size", "conv_group_size", "conv_kernel_size", "final_logit_softcapping", "mask_token_id",
                     "output_multiplier", "selector_rank", "selector_top_k", "target_layer_ids"}


def zlab_dflash2_tensors(c: dict) -> dict[str, list[int]]:
    """Names and shapes of the S8c header (z-lab/dflash tests/fixtures/dflash2-safetensors-header.json
    @ 0698f53) for config ``c``: no prefix, codebooks without ``.weight``."""
    d = c["dflash_config"]
    h, hd, inter, v = c["hidden_size"], c["head_dim"], c["intermediate_size"], c["vocab_size"]
    taps, r = d["conv_kernel_size"], d["selector_rank"]
    conv = [[2, taps, h], [2 * taps * h // d["conv_group_size"], h]]
    out = {"fc.weight": [h, len(d["target_layer_ids"]) * h], "hidden_norm.weight": [h], "norm.weight": [h],
           "candidate_selector.hidden_projection.weight": [r, h],
           "candidate_selector.predecessor_codebook": [v, r], "candidate_selector.successor_codebook": [v, r]}
    for i in range(c["num_hidden_layers"]):
        p = f"layers.{i}."
        out.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [c["num_attention_heads"] * hd, h],
            p + "self_attn.k_proj.weight": [c["num_key_value_heads"] * hd, h],
            p + "self_attn.v_proj.weight": [c["num_key_value_heads"] * hd, h],
            p + "self_attn.o_proj.weight": [h, c["num_attention_heads"] * hd],
            p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
            p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
            p + "mlp.down_proj.weight": [h, inter],
            p + "attention_conv.base_kernel": conv[0], p + "attention_conv.kernel_projection.weight": conv[1],
            p + "mlp_conv.base_kernel": conv[0], p + "mlp_conv.kernel_projection.weight": conv[1]})
    return out


def test_train_tiny_dflash2_small_saves_the_zlab_layout(tmp_path):
    """``--small`` against the shipped target: ``dflash2/`` in the z-lab / inco DFlash 2 layout
    (config keys, names, shapes, BF16), the log with its held-out accepted lengths."""
    out = run("train_tiny_dflash2.py", "--out", str(tmp_path), "--small", "--device", "cpu", "--drafter-steps", "2")
    assert "held-out accepted length" in out
    c = json.loads((tmp_path / "dflash2" / "config.json").read_text())
    assert set(c) == ZLAB_DFLASH2_CONFIG_KEYS and set(c["dflash_config"]) == ZLAB_DFLASH2_KEYS
    assert c["architectures"] == ["DFlash2DraftModel"] and c["model_type"] == "qwen3" and c["is_causal"] is False
    assert c["layer_types"] == ["sliding_attention"] * c["num_hidden_layers"] and c["use_sliding_window"] is True
    assert set(c["rope_parameters"]) == {"rope_theta", "rope_type"} and "rope_theta" not in c
    target = json.loads((ROOT / "tests/fixtures/tiny_pair/target/config.json").read_text())
    assert (c["vocab_size"], c["hidden_size"], c["num_target_layers"]) == (
        target["vocab_size"], target["hidden_size"], target["num_hidden_layers"])
    d = c["dflash_config"]
    assert d["block_size"] == 8 and d["mask_token_id"] == 255 and d["target_layer_ids"] == [1, 3, 5]
    assert d["selector_top_k"] >= 2 and c["hidden_size"] % d["conv_group_size"] == 0
    assert d["output_multiplier"] > 0 and (d["final_logit_softcapping"] is None or d["final_logit_softcapping"] > 0)
    raw = (tmp_path / "dflash2" / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    header.pop("__metadata__", None)
    assert {k: v["shape"] for k, v in header.items()} == zlab_dflash2_tensors(c)
    assert {v["dtype"] for v in header.values()} == {"BF16"}
    assert sorted(p.name for p in (tmp_path / "dflash2").iterdir()) == ["config.json", "model.safetensors"]
    log = json.loads((tmp_path / "dflash2_train_log.json").read_text())
    assert log["drafter_train"]["steps"] == 2
    acc = log["held_out_accepted_length_tf"]
    assert acc["blocks"] > 0 and all(1 <= acc[k] <= d["block_size"] for k in ("unary", "selector", "top_8_oracle"))
