"""The command line starts without torch where it can: ``--version``, ``help``, ``help
COMMAND``, ``adapters``, ``schema`` and ``docs check=true`` run without importing torch (nor triton, numpy,
safetensors' torch API), measured by the modules loaded in a fresh interpreter after the
command ran (the import set, not the time: the machine's load would make a time flaky)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "triton", "numpy", "safetensors.torch")

RUN = """
import json, os, sys
from draftsmith.framework.cli.main import main
rc = main(sys.argv[1:])
with open(os.environ["DRAFTSMITH_IMPORTS_OUT"], "w") as f:
    json.dump({"rc": rc, "modules": sorted(sys.modules)}, f)
"""

LIGHT = [["--version"], ["help"], ["help", "convert"], ["convert", "--help"], ["adapters"], ["schema"],
         ["schema", "out=s.json"]]


def loaded_after(argv: list[str], tmp_path: Path) -> tuple[int, list[str]]:
    out = tmp_path / "imports.json"
    p = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), DRAFTSMITH_IMPORTS_OUT=str(out)))
    assert p.returncode == 0 and out.is_file(), p.stderr[-2000:]
    data = json.loads(out.read_text())
    return data["rc"], data["modules"]


@pytest.mark.parametrize("argv", LIGHT, ids=[" ".join(a) for a in LIGHT])
def test_light_commands_do_not_import_torch(argv, tmp_path):
    rc, mods = loaded_after(argv, tmp_path)
    assert rc == 0
    assert not [m for m in HEAVY if m in mods], [m for m in HEAVY if m in mods]


def test_docs_check_does_not_import_torch(tmp_path):
    """``docs`` compiles every adapter (the lowering registry's entries are data apart from the
    kernels); ``check=true`` against a fresh ``out=`` reports stale docs, exit 1."""
    rc, mods = loaded_after(["docs", "check=true", f"out={tmp_path / 'docs'}"], tmp_path)
    assert rc == 1
    assert not [m for m in HEAVY if m in mods], [m for m in HEAVY if m in mods]
    rc, mods = loaded_after(["docs", "check=true"], tmp_path)
    assert rc == 0 and not [m for m in HEAVY if m in mods], (rc, [m for m in HEAVY if m in mods])


LOWERINGS_PROBE = """
import json, os, sys
from draftsmith.lowering import LOWERINGS
before = [m for m in ("torch", "triton") if m in sys.modules]
names = sorted(LOWERINGS)
fn = LOWERINGS["dense"].fn
print(json.dumps({"before": before, "names": names, "fn": fn.__module__ + "." + fn.__name__,
                  "after": "torch" in sys.modules}))
"""


def test_the_lowering_registry_is_data_and_resolves_kernels_on_first_use(tmp_path):
    p = subprocess.run([sys.executable, "-c", LOWERINGS_PROBE], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(p.stdout)
    assert data["before"] == []
    assert data["names"] == ["dense", "triton_window_block", "trtllm_gen", "window_decode_merge"]
    assert data["fn"] == "draftsmith.lowering.dense.dense" and data["after"]


def test_a_command_that_needs_torch_imports_it(tmp_path):
    """The control: the probe sees torch when a command does import it."""
    rc, mods = loaded_after(["draft", "adapter=minimax_dspark", "device=cpu", "progress=false", "threads=1"], tmp_path)
    assert rc == 0 and "torch" in mods


TABLE_PROBE = """
import json, sys
from draftsmith.framework.cli import main
from draftsmith.framework.cli.keys import COMMANDS as KEYS
prefixes = ("draftsmith.framework.cli.commands.", "draftsmith.framework.docs")
loaded = sorted(m for m in sys.modules if m.startswith(prefixes))
where = {n: main.command(n).__module__ for n in main.COMMANDS}
print(json.dumps({"loaded": loaded, "where": where, "keys": sorted(set(KEYS) - {"help"})}))
"""


def test_commands_load_from_the_table_when_they_run(tmp_path):
    """``cli/main.py`` names each command as ``"module:function"`` (the key table's commands, less
    ``help``) and imports none of them until it runs: each resolves to its own module."""
    p = subprocess.run([sys.executable, "-c", TABLE_PROBE], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(p.stdout)
    assert data["loaded"] == []
    assert sorted(data["where"]) == data["keys"]
    assert data["where"] == {n: "draftsmith.framework.docs.command" if n == "docs" else f"draftsmith.framework.cli.commands.{n}"
                             for n in data["keys"]}
