"""Stacked conversion of small tensors (framework/convert/batch.py) is bit-identical to
converting each group alone, in one window or many, and a stack with a bad tensor fails
with the one-by-one error of the first bad tensor in output order, word for word."""

from __future__ import annotations

import contextlib
import io
import os
import random
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.convert import batch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from many_tensors import make_converting_source  # noqa: E402

SEED = int.from_bytes(os.urandom(4), "little")


def convert(src: Path, out: Path) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}", "progress=false"])
    return rc, err.getvalue()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    src, n = make_converting_source(tmp_path_factory.mktemp("stacked"), 900)
    return src


def one_by_one(monkeypatch) -> None:
    """No group is small enough to stack: the per-group path (the reference)."""
    monkeypatch.setattr(batch, "SMALL_GROUP_BYTES", -1)


def test_stacked_bytes_equal_one_by_one(source, tmp_path, monkeypatch):
    rc, err = convert(source, tmp_path / "stacked")
    assert rc == 0, err
    with monkeypatch.context() as m:  # many small windows: spans read sparse and dense, runs split
        m.setattr(batch, "WINDOW_BYTES", random.Random(SEED).randint(2_000, 40_000))
        rc, err = convert(source, tmp_path / "windows")
        assert rc == 0, err
    one_by_one(monkeypatch)
    rc, err = convert(source, tmp_path / "alone")
    assert rc == 0, err
    for name in ("model.safetensors", "config.json"):
        ref = (tmp_path / "alone" / name).read_bytes()
        assert (tmp_path / "stacked" / name).read_bytes() == ref, name
        assert (tmp_path / "windows" / name).read_bytes() == ref, name


def poisoned(source: Path, dest: Path, seed: int) -> Path:
    """``source`` with a NaN in two norm weights and a NaN scale byte (255) in one MXFP8
    scale, at random layers."""
    import shutil

    shutil.copytree(source, dest)
    tensors = load_file(dest / "model.safetensors")
    rng = random.Random(seed)
    names = sorted(tensors)
    norms = [n for n in names if n.endswith("norm.weight") and ".layers." in n]
    scales = [n for n in names if n.endswith("_scale_inv")]
    for n in rng.sample(norms, 2):
        t = tensors[n].clone()
        t[rng.randrange(t.numel())] = float("nan")
        tensors[n] = t
    n = rng.choice(scales)
    t = tensors[n].clone()
    t.view(torch.uint8).view(-1)[rng.randrange(t.numel())] = 255
    tensors[n] = t
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


def test_stack_error_is_the_first_one_by_one_error(source, tmp_path, monkeypatch):
    src = poisoned(source, tmp_path / "src", SEED)
    rc, err = convert(src, tmp_path / "stacked")
    assert rc == 2 and not (tmp_path / "stacked").exists()
    one_by_one(monkeypatch)
    rc_ref, err_ref = convert(src, tmp_path / "alone")
    assert rc_ref == 2 and ("NaN" in err_ref or "255" in err_ref), err_ref
    assert err == err_ref
