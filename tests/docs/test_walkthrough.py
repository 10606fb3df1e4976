"""docs/writing-an-adapter.md, executed: every ```bash block, in order, in an empty folder.

``draftsmith ...`` commands run in-process (``cli.main``, one torch import for all of
them); anything else runs in ``bash -euo pipefail`` with the venv first on PATH. A command
may declare an expected non-zero status with a trailing ``# exit status N`` comment.
The guide's adapters live in ``./my-adapters`` (``adapter_dir=``): the repository's
``adapters/`` and ``docs/`` must come out untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.adapters import ADAPTER_DIR
from draftsmith.framework import docs
from draftsmith.framework.cli import main as cli

GUIDE = Path(ADAPTER_DIR).parent / "docs" / "writing-an-adapter.md"
_BLOCK = re.compile(r"^```bash\n(.*?)^```$", re.M | re.S)
_HEREDOC = re.compile(r"<<-?\s*'?\"?(\w+)'?\"?")
_STATUS = re.compile(r"#\s*exit status (\d+)\s*$")
_SHELL = re.compile(r"[|;&<>`$(]")


def guide_commands(text: str) -> list[str]:
    """The commands of every bash block, in order (heredocs and ``\\`` continuations kept whole)."""
    out = []
    for block in _BLOCK.findall(text):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            cmd = [line]
            while cmd[-1].endswith("\\") and i < len(lines):
                cmd.append(lines[i])
                i += 1
            m = _HEREDOC.search(line)
            if m:
                while i < len(lines):
                    cmd.append(lines[i])
                    i += 1
                    if cmd[-1].strip() == m.group(1):
                        break
                else:
                    raise AssertionError(f"unterminated heredoc in {GUIDE}: {line}")
            out.append("\n".join(cmd))
    return out


def _repo_state() -> dict[str, str]:
    """Digests of what the guide could touch in the repository: the shipped adapters and
    the files ``draftsmith docs`` writes (other docs are edited by people, not by it)."""
    repo = Path(ADAPTER_DIR).parent
    paths = sorted(Path(ADAPTER_DIR).glob("*.yaml"))
    paths += [repo / "docs" / n for n in (docs.SUPPORTED_FILE, docs.SPEC_FILE, docs.SCHEMA_FILE)]
    paths.append(repo / "README.md")
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "" for p in paths}


def test_guide_parses():
    cmds = guide_commands(GUIDE.read_text(encoding="utf-8"))
    verbs = [shlex.split(c, comments=True)[1] for c in cmds if c.startswith("draftsmith ")]
    for verb in ("synth", "inspect", "convert", "draft", "docs"):
        assert verb in verbs, f"the walkthrough has no `draftsmith {verb}` step"
    assert verbs.index("synth") < verbs.index("convert") < verbs.index("draft") < verbs.index("docs")
    # every adapter-reading command points at the scratch adapters folder, except the one
    # that shows the closest shipped adapter failing
    for c in cmds:
        if c.startswith("draftsmith ") and "adapter=minimax_dspark" not in c:
            assert "adapter_dir=my-adapters" in c, c


def test_walkthrough_runs(tmp_path, monkeypatch, capsys):
    repo = Path(ADAPTER_DIR).parent
    before = _repo_state()
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for cmd in guide_commands(GUIDE.read_text(encoding="utf-8")):
        m = _STATUS.search(cmd.splitlines()[0])
        expected = int(m.group(1)) if m else 0
        if cmd.startswith("draftsmith ") and not _SHELL.search(cmd.split("#", 1)[0]):
            rc = cli.main(shlex.split(cmd, comments=True)[1:])
            cap = capsys.readouterr()
            out = cap.out + cap.err
        else:
            p = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=120)
            rc, out = p.returncode, p.stdout + p.stderr
        assert rc == expected, f"`{cmd}` exited {rc}, expected {expected}:\n{out[-3000:]}"

    cfg = json.loads((tmp_path / "acme-converted" / "config.json").read_text())
    assert R.from_config(cfg).adapter == "acme_dspark"
    assert R.from_config(cfg).max_draft_len == 7
    assert "quantization_config" not in cfg
    page = (tmp_path / "docs-preview" / "supported-drafters.md").read_text()
    assert "`AcmeDSparkDraftModel`" in page and "`acme_dspark`" in page
    assert (repo / "adapters" / "acme_dspark.yaml").exists() is False
    assert _repo_state() == before
