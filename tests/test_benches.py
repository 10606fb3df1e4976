"""Every bench in ``bench/`` runs, at a tiny size on CPU (the Triton ones under the
interpreter), so that none rots unseen: each is run as its usage line says, in a child
process, and its output is checked for what the bench exists to report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
# Benches not listed here are a failure of test_every_bench_is_run: add a run for a new bench.
NOT_BENCHES = {"timing.py", "reliability_report.py"}  # the shared module; the reliability report's generator


def run(script: str, *args: str, interpret: bool = False, timeout: int = 240) -> str:
    """``python bench/<script> args...`` on CPU (no GPU visible); its stdout, after checking exit 0."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    p = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=BENCH, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, f"{script} exited {p.returncode}:\n{p.stderr[-3000:]}"
    return p.stdout


def triton_or_skip():
    pytest.importorskip("triton")


RUNS = {"attention.py", "read_ceiling.py", "convert.py", "draft_step.py", "many_tensors.py", "mask_effect.py",
        "train_tiny_pair.py"}


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
