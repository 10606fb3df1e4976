"""``source=`` given a model root as the hub ships it: the target's ``config.json``, shards and
index at the root, the drafter in the subfolder its adapter declares (``dspark/``); locally
and from the Hugging Face cache (blobs, symlinked snapshots, ``refs/main``) by repo id."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from safetensors.torch import save_file
import torch

from draftsmith.framework.cli.main import main
from support.helpers import one_error

# the target's own config, as at the root of a MiniMax-M3.1-Flash download
TARGET_CONFIG = {"architectures": ["MiniMaxM3VLForConditionalGeneration"], "model_type": "minimax_m3_vl",
                 "text_config": {"num_hidden_layers": 60, "hidden_size": 64}, "torch_dtype": "bfloat16"}



@pytest.fixture(scope="module")
def drafter(tmp_path_factory) -> Path:
    """A synthetic DSpark drafter folder (config.json + safetensors), without synth's target/."""
    d = tmp_path_factory.mktemp("locate")
    assert main(["synth", "adapter=minimax_dspark", f"out={d / 'S'}", "seed=4", "progress=false"]) == 0
    shutil.rmtree(d / "S" / "target")
    return d / "S"


def model_root(root: Path, drafter: Path | None) -> Path:
    """The hub layout of a model root: target config, two shards and their index, generation
    config, and the drafter in ``dspark/`` (left out when ``drafter`` is None)."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(TARGET_CONFIG))
    (root / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    weight_map = {}
    for i, name in enumerate(["model.embed_tokens.weight", "lm_head.weight"], 1):
        shard = f"model-{i:05d}-of-00002.safetensors"
        save_file({name: torch.zeros(8, 4, dtype=torch.bfloat16)}, str(root / shard))
        weight_map[name] = shard
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 128},
                                                                   "weight_map": weight_map}))
    if drafter is not None:
        shutil.copytree(drafter, root / "dspark")
    return root


def hub_cache(cache: Path, repo: str, tree: Path, rev: str = "b" * 40) -> Path:
    """``tree`` stored as huggingface_hub stores a download: each file once in ``blobs/<sha256>``,
    ``snapshots/<rev>/<path>`` relative symlinks to it, ``refs/main`` naming ``rev``."""
    repo_dir = cache / f"models--{repo.replace('/', '--')}"
    (repo_dir / "blobs").mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(rev)
    snap = repo_dir / "snapshots" / rev
    for f in sorted(p for p in tree.rglob("*") if p.is_file()):
        data = f.read_bytes()
        blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snap / f.relative_to(tree)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    return snap


@pytest.mark.parametrize("adapter", [[], ["adapter=minimax_dspark"]], ids=["routed", "adapter"])
def test_model_root_as_downloaded(drafter, tmp_path, capsys, adapter):
    """The root's config.json is the target's: the drafter is read from dspark/, routed by its
    own architecture (or compiled with the named adapter), never from the root's config."""
    root = model_root(tmp_path / "MiniMax-M3.1-Flash", drafter)
    assert main(["inspect", *adapter, f"source={root}", "format=json"]) == 0, capsys.readouterr().err
    cap = capsys.readouterr()
    data = json.loads(cap.out)
    assert data["source"] == str(root / "dspark") and data["adapter"] == "minimax_dspark" and data["complete"]
    assert f"using {root / 'dspark'} (drafter subfolder dspark/)" in cap.err
    # the same plan as the drafter folder given directly
    assert main(["inspect", *adapter, f"source={drafter}", "format=json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"] == data["outputs"]
    out = tmp_path / "T"
    assert main(["convert", *adapter, f"source={root}", f"out={out}", "progress=false"]) == 0
    capsys.readouterr()
    assert json.loads((out / "config.json").read_text())["draftsmith"]["adapter"] == "minimax_dspark"


def test_model_root_without_its_drafter_is_one_line(tmp_path, capsys):
    """Routed by architecture: no adapter serves the root's (the target's) config, and the line
    names the drafter subfolders looked for."""
    root = model_root(tmp_path / "MiniMax-M3.1-Flash", None)
    out = tmp_path / "T"
    assert main(["convert", f"source={root}", f"out={out}"]) == 2
    line = one_error(capsys)
    assert "no adapter serves architectures ['MiniMaxM3VLForConditionalGeneration']" in line, line
    assert "nor a model root holding its drafter: no dspark/ in it" in line, line
    assert not out.exists()


def test_model_root_from_the_hub_cache_by_repo_id(drafter, tmp_path, capsys, monkeypatch):
    snap = hub_cache(tmp_path / "hub", "MiniMaxAI/MiniMax-M3.1-Flash",
                     model_root(tmp_path / "download", drafter))
    assert (snap / "dspark" / "config.json").is_symlink()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    for source in ("MiniMaxAI/MiniMax-M3.1-Flash", "MiniMaxAI/MiniMax-M3.1-Flash@main"):
        assert main(["inspect", f"source={source}", "format=json"]) == 0, capsys.readouterr().err
        cap = capsys.readouterr()
        assert json.loads(cap.out)["source"] == str(snap / "dspark")
        assert "Hugging Face cache, drafter subfolder dspark/" in cap.err
    # a repo id not in the cache: the hint names the hub's current command
    assert main(["inspect", "source=MiniMaxAI/Other"]) == 2
    line = one_error(capsys)
    assert "`hf download`" in line and "huggingface-cli" not in line
