"""Small command-line messages: a bad ``adapter.*`` override found while compiling the spec
is blamed on the argument (not on the shipped adapter file); piped output that its reader
stops early ends without a ``Broken pipe`` line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from draftsmith.adapters import ADAPTER_DIR
from draftsmith.framework.cli.main import main
from support.helpers import one_error

SHIPPED = Path(ADAPTER_DIR) / "minimax_dspark.yaml"
ROOT = Path(ADAPTER_DIR).parent



@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("messages")
    assert main(["synth", "adapter=minimax_dspark", f"out={d / 'S'}", "seed=5", "progress=false"]) == 0
    return d / "S"


# overrides that pass the schema and fail when the spec is compiled (registries, transform params)
COMPILE_STAGE = [
    ("adapter.family=nope", "family: unknown family 'nope'"),
    ("adapter.weights.transforms.0.op=nah", "weights.transforms[0].op: unknown transform 'nah'"),
    ("+adapter.weights.transforms.0.params.mode=bad", "weights.transforms[0].params.mode: unknown key"),
    ("adapter.attention.lowering.windowed.cpu=bogus", "attention.lowering.windowed.cpu: unknown lowering 'bogus'"),
]


@pytest.mark.parametrize("arg,want", COMPILE_STAGE, ids=[a.split("=")[0] for a, _ in COMPILE_STAGE])
def test_bad_override_is_blamed_on_the_argument(arg, want, src, tmp_path, capsys):
    assert main(["inspect", "adapter=minimax_dspark", f"source={src}", arg]) == 2
    line = one_error(capsys)
    assert line.startswith(f"error: command line: {arg}: {want}"), line
    assert str(SHIPPED) not in line


def test_the_same_mistake_in_a_file_is_blamed_on_the_file(src, tmp_path, capsys):
    d = tmp_path / "adapters"
    d.mkdir()
    (d / "mine.yaml").write_text(SHIPPED.read_text().replace("\nname: minimax_dspark\n", "\nname: mine\n")
                                 .replace("\nfamily: gqa_dflash\n", "\nfamily: nope\n"))
    assert main(["inspect", "adapter=mine", f"adapter_dir={d}", f"source={src}"]) == 2
    assert one_error(capsys).startswith(f"error: {d / 'mine.yaml'}: family: unknown family 'nope'")
    # an override elsewhere does not take the blame for the file's mistake
    assert main(["inspect", "adapter=mine", f"adapter_dir={d}", f"source={src}", "adapter.attention.window=2048"]) == 2
    assert one_error(capsys).startswith(f"error: {d / 'mine.yaml'}: family:")


@pytest.mark.parametrize("args", [["schema"], ["help", "convert"]], ids=["schema", "help"])
def test_output_into_a_closed_pipe_ends_quietly(args):
    """``draftsmith schema | head -c 10``: the reader gone before the output is written (its read
    end closed first), the command exits 0 and writes no ``Broken pipe`` line (it did: the
    OSError handler took the BrokenPipeError for an environment error, exit 2)."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "draftsmith", *args], stdout=w, stderr=subprocess.PIPE,
                           text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    finally:
        os.close(w)
    assert p.returncode == 0 and p.stderr == "", (p.returncode, p.stderr)
