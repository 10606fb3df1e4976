"""Hostile input, round two: bounded work for every input (time, memory, file kinds).

Huge headers (100 000 tensors), catastrophic regexes, FIFOs and devices where files are
expected, oversize configs behind links, checkpoints whose index escapes the folder,
malformed numbers in headers and configs: each ends in one ``error:`` line per problem and
exit 2 (``inspect``: 1 for an incomplete checkpoint) within seconds, nothing written.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.engine import load_adapter
from draftsmith.framework.convert.plan import MAX_PROBLEM_LINES, Plan, Problem
from draftsmith.framework.convert.checkpoint import SourceTensor
from draftsmith.framework.convert.synth import synthesize
from draftsmith.transforms.base import TensorMeta
from reliability_log import record

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from many_tensors import write_many_tensor_shard  # noqa: E402

import torch  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("pristine") / "ckpt"
    synthesize(load_adapter("minimax_dspark"), "tiny", d, seed=5)
    shutil.rmtree(d / "target")
    return d


def clone(base: Path, tmp_path: Path) -> Path:
    d = tmp_path / "src"
    shutil.copytree(base, d)
    return d


def run(args: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue(), time.perf_counter() - t


def refused(args: list[str], *needles: str, rc_want: int = 2, seconds: float = 8.0) -> str:
    rc, out, err, dt = run(args)
    assert rc == rc_want, f"exit {rc}: {out[-300:]} {err[-600:]}"
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines and all(l.startswith("error: ") for l in lines), err[-2000:]
    for n in needles:
        assert any(n in l for l in lines), f"{n!r} not in {lines[:5]}"
    assert dt < seconds, f"took {dt:.1f} s"
    return err


# ----------------------------------------------------------------------------- linear plans
def test_problem_lines_linear():
    """``Plan.problem_lines`` on 30 000 problems in well under a second per 10 000 (was quadratic)."""
    n = 30_000
    f = Path("/x/model.safetensors")
    meta = TensorMeta((1,), torch.float32)
    sources = {f"src.layers.{i}.w": SourceTensor(f"src.layers.{i}.w", f, meta) for i in range(n)}
    renamed = {s: s.replace("src.", "dst.") for s in sources}
    problems = [Problem(f"dst.layers.{i}.w", "UNEXPECTED", f"from src.layers.{i}.w") for i in range(n)]
    plan = Plan(Path("/x"), {}, sources, renamed, [], [], {}, [], problems)
    t = time.perf_counter()
    lines = plan.problem_lines()
    dt = time.perf_counter() - t
    assert dt < 3.0, dt
    assert len(lines) == MAX_PROBLEM_LINES + 1
    assert lines[0] == "/x/model.safetensors: dst.layers.0.w | UNEXPECTED | from src.layers.0.w"
    assert lines[-1].startswith(f"/x: ... and {n - MAX_PROBLEM_LINES} more problems ({n - MAX_PROBLEM_LINES} UNEXPECTED)")
    every = plan.problem_lines(limit=n)
    assert len(every) == n and every[n - 1].startswith("/x/model.safetensors: dst.layers.59999.w | UNEXPECTED")
    record("bounds", "30 000 plan problems formatted", "linear, < 3 s, report capped at 200 lines + a count")


def test_many_tensor_header_in_seconds(base, tmp_path):
    """A 20 000-tensor extra shard (bench/many_tensors.py runs 100 000): convert refuses in seconds."""
    src = clone(base, tmp_path)
    write_many_tensor_shard(src / "extra.safetensors", 20_000)
    out = tmp_path / "out"
    err = refused(["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}"], "UNEXPECTED",
                  "more problems", seconds=9.0)
    assert len(err.splitlines()) == MAX_PROBLEM_LINES + 1
    assert not out.exists()
    record("bounds", "20 000-tensor shard header (convert)", "exit 2 in < 9 s, 201 lines, nothing written")


def test_catastrophic_rename_regex_converts(base, tmp_path):
    """``.*.*.*.*.*.*!`` as a rename rule: RE2 matches in linear time; the rule matches no
    tensor, so it is refused as UNMATCHED in seconds (Python's re ran past 300 s)."""
    src = clone(base, tmp_path)
    ad = tmp_path / "adapters"
    ad.mkdir()
    text = (Path(__file__).resolve().parents[1] / "adapters" / "minimax_dspark.yaml").read_text()
    text = text.replace("name: minimax_dspark", "name: evil_rx", 1)
    text = text.replace("  rename:\n", "  rename:\n    - {kind: regex, match: '.*.*.*.*.*.*!', to: x}\n", 1)
    (ad / "evil_rx.yaml").write_text(text)
    long_name = "model." + "a" * 5000
    write_many_tensor_shard(src / "long.safetensors", 3, prefix=long_name + "{i}")
    refused(["convert", "adapter=evil_rx", f"adapter_dir={ad}", f"source={src}", f"out={tmp_path / 'o'}"],
            "matches no tensor", seconds=8.0)
    record("bounds", "rename regex .*.*.*.*.*.*! on 5000-char names", "exit 2 (UNMATCHED) in seconds")
