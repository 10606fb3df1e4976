"""``draftsmith init``'s last mile (issue 47 point 2, issue 46): a starter spec left as written
cannot hide math (keys no rule reads are fixed at their value), it carries the family's
lowering table, its ``$schema`` line is relative to where it is written, a model root yields
the drafter's spec, and a malformed config or path is one line, exit 2."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import yaml

from draftsmith.framework.starter import infer as init
from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.family import get_family
from support.helpers import one_error


def copy_with(src: Path, dst: Path, **changes) -> Path:
    """``src`` copied (config.json and tensors, no subfolders) with top-level config ``changes``."""
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            shutil.copy(f, dst / f.name)
    raw = json.loads((src / "config.json").read_text())
    raw.update(changes)
    (dst / "config.json").write_text(json.dumps(raw))
    return dst


def test_starter_spec_refuses_a_config_whose_math_keys_differ(tmp_path, capsys, checkpoints):
    """MiniMax DSpark keys no rule reads (qk_norm_type, dspark_use_dense_ffn, ...) are fixed at the
    value seen: the spec left as init wrote it accepts its own checkpoint and refuses one with
    ``qk_norm_type: per_layer`` or ``dspark_use_dense_ffn: false``, naming the key."""
    src = checkpoints("minimax_dspark").source
    spec = tmp_path / "mine.yaml"
    assert main(["init", f"source={src}", f"out={spec}"]) == 0
    capsys.readouterr()
    data = yaml.safe_load(spec.read_text())
    raw = json.loads((src / "config.json").read_text())
    for key in ("qk_norm_type", "dspark_use_dense_ffn", "dspark_hybrid_context_fusion"):
        assert data["config"]["fixed"][key] == raw["text_config"].get(key, raw.get(key)), key
    assert "irrelevant" not in data["config"]
    assert main(["inspect", f"adapter={spec}", f"source={src}"]) == 0, capsys.readouterr().out
    capsys.readouterr()
    for key, value in (("qk_norm_type", "per_layer"), ("dspark_use_dense_ffn", False)):
        other = copy_with(src, tmp_path / key, **{key: value})
        if "text_config" in raw and key in raw["text_config"]:  # the nested copy wins: change it there
            cfg = json.loads((other / "config.json").read_text())
            cfg["text_config"][key] = value
            (other / "config.json").write_text(json.dumps(cfg))
        assert main(["inspect", f"adapter={spec}", f"source={other}"]) == 2
        line = one_error(capsys)
        assert key in line and "config.fixed" in line, line


def test_format_declared_keys_stay_irrelevant_with_the_formats_reason(tmp_path, capsys, checkpoints):
    """speculators' metadata keys are declared irrelevant by the speculators format (a speculators
    adapter's reason, naming it); every other key no rule reads is fixed."""
    src = copy_with(checkpoints("speculators_dspark").source, tmp_path / "s", speculators_version="0.9.0")
    data = yaml.safe_load(init.infer(src, "mine").yaml)
    formats = {n: load_adapter(n).spec.config.irrelevant for n in ("speculators_dflash", "speculators_dflash2",
                                                                   "speculators_dspark")}
    assert set(data["config"]["irrelevant"]) == {"speculators_config", "speculators_version"}
    for key, why in data["config"]["irrelevant"].items():
        assert any(why == f"{r[key]} (the {n} format declares it)" for n, r in formats.items()), why
    assert data["config"]["fixed"] == {"draft_vocab_size": json.loads((src / "config.json").read_text())["draft_vocab_size"]}


def test_init_writes_the_familys_lowering_table(tmp_path, capsys, checkpoints):
    """The spec names the family's lowerings (the kernel on SM90, not the schema's slow default),
    and the compiled spec resolves every layer on sm90 to it."""
    src = checkpoints("zlab_dflash").source
    spec = tmp_path / "mine.yaml"
    assert main(["init", f"source={src}", f"out={spec}"]) == 0
    capsys.readouterr()
    family = get_family("gqa_dflash")
    table = yaml.safe_load(spec.read_text())["attention"]["lowering"]
    assert table == family.lowering
    assert family.lowering["windowed"]["sm90"] == "triton_window_block"
    assert family.lowering["full"]["sm90"] == "triton_window_block"
    for kind in ("windowed", "full"):
        got = load_adapter(str(spec)).spec.attention.lowering[kind]
        assert got.sm90 == "triton_window_block" and got.cpu == "dense", kind


def test_schema_line_is_relative_to_the_written_spec(tmp_path, monkeypatch, checkpoints):
    """Inside the repository the ``$schema`` path is relative to the spec's folder (and resolves to
    the schema file); outside it there is no such line."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "adapter-spec.schema.json").write_text("{}")
    monkeypatch.setattr(init, "REPO_ROOT", repo)
    monkeypatch.setattr(init, "SCHEMA_FILE", repo / "docs" / "adapter-spec.schema.json")
    src = checkpoints("zlab_dflash").source
    for out in (repo / "adapters" / "a.yaml", repo / "my" / "deep" / "a.yaml", repo / "a.yaml"):
        out.parent.mkdir(parents=True, exist_ok=True)
        first = init.infer(src, "a", out).yaml.splitlines()[0]
        prefix = "# yaml-language-server: $schema="
        assert first.startswith(prefix), first
        rel = first[len(prefix):]
        assert not os.path.isabs(rel) and (out.parent / rel).resolve() == (repo / "docs" / "adapter-spec.schema.json")
    outside = tmp_path / "elsewhere" / "a.yaml"
    outside.parent.mkdir()
    assert "$schema" not in init.infer(src, "a", outside).yaml
    assert "$schema" not in init.infer(src, "a", None).yaml


def test_model_root_gives_the_drafters_spec(tmp_path, capsys, checkpoints):
    """``source=<model root>``: the drafter subfolder an adapter declares (dspark/), as convert
    resolves it; never a spec for the root's own (the target's) architecture. A root whose
    drafter sits in an undeclared subfolder is refused in one line naming it."""
    ck = checkpoints("minimax_dspark")
    root = tmp_path / "MiniMax-M3.1-Flash"
    shutil.copytree(ck.source / "target", root)  # the target's config and tensors at the root
    copy_with(ck.source, root / "dspark")
    spec = tmp_path / "mine.yaml"
    assert main(["init", f"source={root}", f"out={spec}"]) == 0
    cap = capsys.readouterr()
    assert f"using {root / 'dspark'} (drafter subfolder dspark/)" in cap.err
    data = yaml.safe_load(spec.read_text())
    assert data["match"]["architectures"] == json.loads((ck.source / "config.json").read_text())["architectures"]
    assert main(["inspect", f"adapter={spec}", f"source={root}"]) == 0, capsys.readouterr().out
    capsys.readouterr()

    other = tmp_path / "Other-Root"
    shutil.copytree(ck.source / "target", other)
    copy_with(ck.source, other / "drafter")
    assert main(["init", f"source={other}", f"out={tmp_path / 'other.yaml'}"]) == 2
    line = one_error(capsys)
    assert "drafter/" in line and f"source={other / 'drafter'}" in line, line
    assert not (tmp_path / "other.yaml").exists()


def test_malformed_architectures_and_paths_are_one_line(tmp_path, capsys, checkpoints):
    """``architectures`` as a string, or a source path holding a newline: one line, exit 2, nothing written."""
    src = checkpoints("zlab_dflash").source
    arch = json.loads((src / "config.json").read_text())["architectures"][0]
    bad = copy_with(src, tmp_path / "bad", architectures=arch)
    assert main(["init", f"source={bad}", f"out={tmp_path / 'a.yaml'}"]) == 2
    line = one_error(capsys)
    assert "architectures" in line and "list" in line, line
    nl = copy_with(src, tmp_path / "new\nline")
    assert main(["init", f"source={nl}", f"out={tmp_path / 'b.yaml'}"]) == 2
    line = one_error(capsys)
    assert "source=" in line and "newline" in line, line
    assert not (tmp_path / "a.yaml").exists() and not (tmp_path / "b.yaml").exists()
