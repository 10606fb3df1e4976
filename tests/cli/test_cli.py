"""The command line as a careful user expects it (issue 18, points 2-8): every key of every
command, given a broken value, is one line naming it, exit 2, no traceback (parametrized from
the one key table, so it grows with it); help and docs/cli.md come from that table;
``source=`` finds model roots and the local Hugging Face cache; outputs follow the umask."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from draftsmith.framework.cli import keys as K
from draftsmith.framework.cli.main import main
from support.helpers import one_error
from draftsmith.framework.runtime import memory

BROKEN = {"int": "abc", "float": "1e999", "bool": "maybe", "enum": "bogus", "path": "", "str": "", "adapter": "minimax_dsprak"}
CASES = [(c.name, k) for c in K.COMMANDS.values() for k in c.keys]



@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    assert main(["synth", "adapter=minimax_dspark", f"out={d / 'S'}", "seed=2", "progress=false"]) == 0
    return d / "S"


@pytest.mark.parametrize("command,key", CASES, ids=[f"{c}-{k.name}" for c, k in CASES])
def test_broken_value_is_one_line(command, key, capsys, tmp_path, monkeypatch, src):
    """The command's required keys valid, ``key`` broken: the error names ``key=value``."""
    monkeypatch.chdir(tmp_path)
    value = BROKEN[key.type]
    pair = Path(K.__file__).parents[2] / "tests" / "fixtures" / "tiny_pair"
    valid = {"adapter": "minimax_dspark", "out": str(tmp_path / "o"), "source": str(src),
             "target": str(pair / "target"), "checkpoint": str(pair / "dspark"), "prompts": str(pair / "prompts.jsonl")}
    argv = [f"{k.name}={valid[k.name]}" for k in K.COMMANDS[command].keys if k.required and k.name != key.name]
    assert main([command, *argv, f"{key.name}={value}"]) == 2
    assert not (tmp_path / "o").exists()
    line = one_error(capsys)
    assert f"{key.name}={value}" in line, line


@pytest.mark.parametrize("command", [c for c in K.COMMANDS if c != "help"])
def test_unknown_key_has_did_you_mean(command, capsys):
    first = K.COMMANDS[command].keys[0].name
    assert main([command, f"{first[:-1]}x=1"]) == 2
    line = one_error(capsys)
    assert "unknown key" in line and f"did you mean {first!r}" in line, line


def test_keys_of_other_commands_refused(capsys, src, tmp_path):
    assert main(["convert", "adapter=minimax_dspark", f"source={src}", f"out={tmp_path / 'T'}", "device=cuda",
                 "format=json"]) == 2
    assert "'device' does not apply to `draftsmith convert`" in one_error(capsys)
    assert not (tmp_path / "T").exists()
    assert main(["inspect", f"source={src}", "verbose=true"]) == 2
    assert "unknown key 'verbose'" in one_error(capsys)


def test_help_version_and_docs_page_list_every_key(capsys):
    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("draftsmith ")
    page = (Path(K.__file__).parents[2] / "docs" / "cli.md").read_text()
    assert page == K.cli_md()
    for c in K.COMMANDS.values():
        for argv in (["help", c.name], [c.name, "--help"], [c.name, "-h"]):
            assert main(argv) == 0
            out = capsys.readouterr().out
            assert all(f"  {k.name} " in out for k in c.keys), (argv, out)
        assert f"## `draftsmith {c.name}`" in page and all(f"| `{k.name}` |" in page for k in c.keys)
    assert main(["help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {c} " in out for c in K.COMMANDS), out
    assert main(["adapters"]) == 0
    out = capsys.readouterr().out
    assert "minimax_dspark" in out and "DSparkMiniMaxDraftModel" in out and "gqa_dflash" in out


def test_adapter_override_mistakes(capsys, src, tmp_path):
    base = ["convert", "adapter=minimax_dspark", f"source={src}", f"out={tmp_path / 'T'}"]
    assert main(base + ["adapter.attention.layers.0.causal=true"]) == 2
    line = one_error(capsys)
    assert "prefix the override with +" in line and "'+adapter.attention.layers.0.causal=true'" in line
    assert main(base + ["adapter.attention.window=abc"]) == 2
    line = one_error(capsys)
    assert line.startswith("error: command line: adapter.attention.window=abc:") and ".yaml" not in line
    assert main(base + ["adapter.attention.windo=3"]) == 2
    assert "did you mean 'window'" in one_error(capsys)
    # values Hydra's lexer cannot take are quoted for it
    assert main(base + ["adapter.description=a (b), c ~d", "progress=false"]) == 0
    capsys.readouterr()


def test_adapter_name_must_equal_file_name(capsys, src, tmp_path):
    """An adapter is named by its file (issue 18, point 3): ``name:`` differing from the file's
    stem is one line naming the file, the key and both names, exit 2, nothing written, whether
    the file is reached by ``adapter_dir``, by ``adapter=path.yaml`` or through ``extends:``."""
    shipped = (Path(K.__file__).parents[2] / "adapters" / "minimax_dspark.yaml").read_text()
    assert shipped.count("\nname: minimax_dspark\n") == 1
    d = tmp_path / "ad"
    d.mkdir()
    (d / "mine.yaml").write_text(shipped)  # a copy saved under another name, name: unchanged
    out = tmp_path / "o"

    def refused(args, *want):
        assert main(args) == 2
        line = one_error(capsys)
        assert all(w in line for w in want), (want, line)
        assert not out.exists()
        return line

    line = refused(["convert", "adapter=mine", f"adapter_dir={d}", f"source={src}", f"out={out}"],
                   f"{d / 'mine.yaml'}:", ": name: 'minimax_dspark' differs from the file name 'mine.yaml'")
    assert line.startswith(f"error: {d / 'mine.yaml'}:4: name:"), line  # file:line of the name key
    refused(["inspect", f"adapter={d / 'mine.yaml'}", f"source={src}"], "'minimax_dspark'", "'mine.yaml'")
    # extends: a derived file must state its own name (it would inherit its base's) ...
    (d / "kid.yaml").write_text("extends: minimax_dspark\ndescription: derived\n")
    refused(["inspect", "adapter=kid", f"adapter_dir={d}", f"source={src}"],
            f"{d / 'kid.yaml'}: name: required", "extends:", "name: kid")
    # ... and a base reached through extends: is checked like any file
    (d / "kid.yaml").write_text("name: kid\nextends: mine\n")
    refused(["inspect", "adapter=kid", f"adapter_dir={d}", f"source={src}"], f"{d / 'mine.yaml'}:4: name: 'minimax_dspark'")
    # the command line cannot rename an adapter away from its file either
    refused(["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}", "adapter.name=other"],
            "adapter.name=other", "minimax_dspark.yaml")
    # the control: the same files with name == file name are accepted
    (d / "mine.yaml").write_text(shipped.replace("\nname: minimax_dspark\n", "\nname: mine\n"))
    assert main(["inspect", "adapter=kid", f"adapter_dir={d}", f"source={src}"]) == 0, capsys.readouterr()
    assert main(["inspect", f"adapter={d / 'mine.yaml'}", f"source={src}"]) == 0, capsys.readouterr()
    capsys.readouterr()


def test_lowering_and_memory_checked_up_front(capsys, src, monkeypatch):
    assert main(["draft", "adapter=minimax_dspark", "lowering=triton_window_block"]) == 2
    assert "not available on cpu; available here: dense" in one_error(capsys)
    assert main(["draft", "adapter=minimax_dspark", "lowering=bogus"]) == 2
    assert "lowering=bogus: unknown lowering" in one_error(capsys)
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2**30)
    # zlab_dflash has full-attention layers: the KV cache and context rows grow with context
    assert main(["draft", "adapter=zlab_dflash", "context=10000000", "progress=false"]) == 2
    line = one_error(capsys)
    assert "context=10000000" in line and "needs about" in line and "full-attention" in line and "1.00 GiB free" in line


def _hf_cache(root: Path, repo: str, src: Path, rev: str = "a" * 40, sub: str = "") -> None:
    d = root / f"models--{repo.replace('/', '--')}"
    (d / "refs").mkdir(parents=True)
    (d / "refs" / "main").write_text(rev)
    shutil.copytree(src, d / "snapshots" / rev / sub if sub else d / "snapshots" / rev)


def test_source_locations(capsys, src, tmp_path, monkeypatch):
    # a model root holding the drafter in dspark/ (minimax_dspark declares match.subfolders)
    root = tmp_path / "MiniMax-M3.1-Flash"
    shutil.copytree(src, root / "dspark")
    assert main(["inspect", f"source={root}", "format=json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == str(root / "dspark")
    # a Hugging Face repo id, from the local cache only (HF_HUB_CACHE honoured)
    cache = tmp_path / "hub"
    _hf_cache(cache, "acme/drafter", src)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    assert main(["inspect", "source=acme/drafter", "format=json"]) == 0
    assert "snapshots" in json.loads(capsys.readouterr().out)["source"]
    assert main(["inspect", "source=acme/drafter@" + "a" * 40]) == 0
    capsys.readouterr()
    assert main(["inspect", "source=acme/missing"]) == 2
    assert "no snapshot of acme/missing" in one_error(capsys)
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert main(["inspect", "source=acme/drafter@main", "format=json"]) == 0
    capsys.readouterr()
    # a converted folder is named as such
    assert main(["convert", f"source={src}", f"out={tmp_path / 'T'}", "progress=false"]) == 0
    capsys.readouterr()
    assert main(["convert", f"source={tmp_path / 'T'}", f"out={tmp_path / 'U'}"]) == 2
    assert "already converted by draftsmith 0.1.0 with minimax_dspark" in one_error(capsys)


def test_outputs_follow_umask(src, tmp_path, capsys):
    old = os.umask(0o022)
    try:
        assert main(["convert", f"source={src}", f"out={tmp_path / 'T'}", "progress=false"]) == 0
        os.umask(0o027)
        assert main(["convert", f"source={src}", f"out={tmp_path / 'V'}", "progress=false"]) == 0
    finally:
        os.umask(old)
    capsys.readouterr()
    for out, d, f in ((tmp_path / "T", 0o755, 0o644), (tmp_path / "V", 0o750, 0o640)):
        assert stat.S_IMODE(out.stat().st_mode) == d
        files = [p for p in out.rglob("*") if p.is_file()]
        assert files and all(stat.S_IMODE(p.stat().st_mode) == f for p in files)


def test_json_output_for_inspect_and_convert(src, tmp_path, capsys):
    assert main(["convert", f"source={src}", f"out={tmp_path / 'T'}", "format=json"]) == 0
    cap = capsys.readouterr()
    data = json.loads(cap.out)
    assert data["adapter"] == "minimax_dspark" and data["complete"] is True
    assert "config.json" in data["files"] and any(f.endswith(".safetensors") for f in data["files"])
    assert set(data["outputs"]) and all("from" in v and "shape" in v for v in data["outputs"].values())
    assert main(["inspect", f"source={src}", "format=json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"] == data["outputs"]


def test_closed_stdout_pipe_is_quiet():
    """``draftsmith convert --help | head``: a reader that stops early ends the output quietly
    (exit 0, no BrokenPipeError traceback). The read end is closed before the child writes."""
    import os
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "draftsmith", "convert", "--help"], stdout=w,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    assert p.returncode == 0 and "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr
