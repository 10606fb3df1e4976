"""README.md, executed: every ``draftsmith`` command of every ```bash block, in order, in an
empty folder (the install line's ``draftsmith`` steps included; pip/pytest steps skipped),
and the "An adapter, in short" YAML validated as a spec. The repository's generated docs
and adapters must come out untouched."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch
from test_walkthrough import _repo_state, guide_commands

from draftsmith.adapters import ADAPTER_DIR
from draftsmith.framework.cli import main as cli
from draftsmith.framework.spec.loading import load_spec

README = Path(ADAPTER_DIR).parent / "README.md"


def readme_commands() -> list[list[str]]:
    """argv of each ``draftsmith`` step, in order (``a && b`` split into its steps)."""
    out = []
    for cmd in guide_commands(README.read_text(encoding="utf-8")):
        for step in cmd.split("&&"):
            words = shlex.split(step.strip(), comments=True)
            if words and words[0] == "draftsmith":
                out.append(words[1:])
    return out


def test_readme_commands_run_in_order(tmp_path, monkeypatch, capsys):
    before = _repo_state()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").symlink_to(README.parent / "tests")  # README commands run in a checkout
    threads = torch.get_num_threads()
    cmds = readme_commands()
    verbs = [c[0] for c in cmds]
    assert verbs[:2] == ["convert", "draft"], verbs  # the main command: convert, then draft on it
    try:
        for argv in cmds:
            argv = argv + (["threads=1"] if argv[0] in ("convert", "draft", "synth") else [])
            rc = cli.main(argv)
            cap = capsys.readouterr()
            assert rc == 0, f"`draftsmith {' '.join(argv)}` exited {rc}:\n{(cap.out + cap.err)[-3000:]}"
            if argv[0] == "draft":  # names the checkpoint it drafted on, and explains the output
                assert cap.out.startswith(f"draft step  {dict(a.split('=', 1) for a in argv[1:])['checkpoint']}\n")
                assert all(w in cap.out for w in ("block", "max_draft_len", "anchor", "confidence"))
    finally:
        torch.set_num_threads(threads)
    assert (tmp_path / "first-run" / "config.json").is_file()
    assert (tmp_path / "my_adapters" / "my_drafter.yaml").is_file()
    assert _repo_state() == before


def test_readme_adapter_in_short_is_a_valid_spec(tmp_path):
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### An adapter, in short"):]
    block = re.search(r"^```yaml\n(.*?)^```$", section, re.M | re.S).group(1)
    name = re.search(r"^name: (\w+)$", block, re.M).group(1)
    f = tmp_path / f"{name}.yaml"
    f.write_text(block)
    spec, _ = load_spec(str(f))
    assert spec.name == name and spec.match.architectures == ["MyDraftModel"]
    assert [r.kind for r in spec.weights.rename][:3] == ["template", "prefix", "regex"]


def setup_line() -> str:
    """The one command of the "Set up" section's first bash block."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Set up"):]
    block = re.search(r"^```bash\n(.*?)^```$", section, re.M | re.S).group(1)
    lines = [l for l in block.splitlines() if l.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_setup_line_runs_twice_and_leaves_only_ignored_files(tmp_path, monkeypatch, capsys):
    """The set-up line's ``draftsmith`` steps, run twice in one folder, exit 0 both times; what
    the line creates (its venv included) is covered by the repository's ``.gitignore``."""
    import subprocess

    line = setup_line()
    steps = [shlex.split(s.strip()) for s in line.split("&&")]
    runs = [s[1:] for s in steps if s[0] == "draftsmith"]
    assert [r[0] for r in runs] == ["convert", "draft"], runs
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    try:
        for attempt in (1, 2):
            for argv in runs:
                rc = cli.main(argv + ["threads=1", "progress=false"])
                cap = capsys.readouterr()
                assert rc == 0, f"run {attempt}: `draftsmith {' '.join(argv)}` exited {rc}:\n{(cap.out + cap.err)[-2000:]}"
    finally:
        torch.set_num_threads(threads)
    venvs = [s[3] for s in steps if s[:3] == ["python3", "-m", "venv"]]
    created = sorted(p.name + "/" if p.is_dir() else p.name for p in tmp_path.iterdir()) + [v + "/" for v in venvs]
    assert {"first-run/", "first-run.source/", ".venv/"} <= set(created), created
    repo = README.parent
    if not (repo / ".git").exists():
        pytest.skip("not a git checkout: .gitignore cannot be asked")
    for name in created:
        p = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", "--no-index", name], timeout=30)
        assert p.returncode == 0, f"{name} (created by the README's set-up line) is not in .gitignore"


def test_skips_say_why_and_readme_installs_what_ci_does():
    """pytest prints every skip's reason; the README's test set-up installs the crosscheck
    extra and speculators exactly as ``.ci/run`` does (else the crosschecks skip)."""
    import tomllib

    repo = README.parent
    opts = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert any(o.startswith("-r") and ("s" in o[2:] or "a" in o[2:]) for o in shlex.split(opts.get("addopts", "")))
    ci = (repo / ".ci" / "run").read_text()
    text = README.read_text(encoding="utf-8")
    section = text[text.index("Run the tests"):text.index("## Use")]
    assert "-e '.[test,crosscheck]'" in ci and "pip install -e '.[test,crosscheck]'" in section
    nodeps = re.search(r"^python -m pip install -q --no-deps ([^\n]+)", ci, re.M).group(1).strip()
    assert f"--no-deps {nodeps}" in section, nodeps
    readers = re.search(r"^(\.ci/readers-src [^\n]+)", ci, re.M).group(1).strip()  # the engines' reader sources
    assert readers in section, readers
