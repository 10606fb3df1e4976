"""overwrite=true never destroys what draftsmith did not write (issue: CLI safety, point 1).

Each case runs the real command line in-process and checks the file system afterwards:
the protected tree must be byte-identical, the exit code 2, the message one line.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from draftsmith.framework.cli.main import main
from draftsmith.framework.io.ownership import MARKER


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root`` (symlinks by target)."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture()
def work(tmp_path, monkeypatch):
    """A working directory with a synthetic source ``S`` (and HOME elsewhere)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["synth", "adapter=minimax_dspark", "out=S", "seed=1"]) == 0
    return cwd


def convert(*args) -> int:
    return main(["convert", "adapter=minimax_dspark", *args])


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def test_marker_written_and_marked_output_replaced(work, capsys):
    assert convert("source=S", "out=T") == 0
    assert (work / "T" / MARKER).is_file()
    assert (work / "S" / MARKER).is_file()  # synth marks its folder too
    (work / "T" / "stale.txt").write_text("from an earlier run")
    assert convert("source=S", "out=T", "overwrite=true") == 0
    assert not (work / "T" / "stale.txt").exists()
    assert (work / "T" / "config.json").is_file()


@pytest.mark.parametrize("out", ["S", "."])
def test_refuses_source_itself_or_cwd(work, capsys, out):
    before = tree_digest(work)
    assert convert("source=S", f"out={out}", "overwrite=true") == 2
    assert "refusing to overwrite" in one_error(capsys)
    assert tree_digest(work) == before


def test_refuses_ancestor_of_source(work, tmp_path, capsys):
    deep = work / "A" / "B"
    deep.mkdir(parents=True)
    assert main(["synth", "adapter=minimax_dspark", f"out={deep / 'S2'}", "seed=2"]) == 0
    before = tree_digest(work / "A")
    assert convert(f"source={deep / 'S2'}", "out=A", "overwrite=true") == 2
    assert "is or contains the source" in one_error(capsys)
    assert tree_digest(work / "A") == before


def test_refuses_inside_source(work, capsys):
    before = tree_digest(work / "S")
    assert convert("source=S", "out=S/target", "overwrite=true") == 2
    assert "lies inside the source" in one_error(capsys)
    assert tree_digest(work / "S") == before


def test_refuses_home_and_unrelated_folder(work, capsys):
    home = Path(os.environ["HOME"])
    (home / "notes.txt").write_text("mine")
    assert convert("source=S", f"out={home}", "overwrite=true") == 2
    assert "home directory" in one_error(capsys)
    assert (home / "notes.txt").read_text() == "mine"
    other = work / "X"
    other.mkdir()
    (other / "unrelated.bin").write_bytes(b"\x00" * 10)
    assert convert("source=S", "out=X", "overwrite=true") == 2
    assert "not written by draftsmith" in one_error(capsys)
    assert (other / "unrelated.bin").read_bytes() == b"\x00" * 10


def test_empty_folder_may_be_replaced(work, capsys):
    (work / "E").mkdir()
    assert convert("source=S", "out=E", "overwrite=true") == 0
    assert (work / "E" / "config.json").is_file()


def test_refuses_symlink_and_file(work, capsys):
    assert convert("source=S", "out=T") == 0
    os.symlink(work / "T", work / "L")
    assert convert("source=S", "out=L", "overwrite=true") == 2
    assert "symbolic link" in one_error(capsys)
    (work / "F").write_text("a file")
    assert convert("source=S", "out=F", "overwrite=true") == 2
    assert "not a folder" in one_error(capsys)
    assert (work / "F").read_text() == "a file"


@pytest.mark.parametrize("value", ["no", "yes", "maybe", "2", "'true '"])
def test_booleans_are_strict(work, capsys, value):
    assert convert("source=S", "out=T") == 0
    before = tree_digest(work)
    assert convert("source=S", "out=T", f"overwrite={value}") == 2
    line = one_error(capsys)
    assert line.startswith("error: overwrite=") and "true or false" in line
    assert tree_digest(work) == before


def test_docs_check_boolean_is_strict(capsys):
    assert main(["docs", "check=no"]) == 2
    assert "check=no" in one_error(capsys)


@pytest.mark.parametrize("value,code", [("1", 0), ("0", 2), ("false", 2), ("true", 0)])
def test_boolean_spellings(work, capsys, value, code):
    assert convert("source=S", "out=T") == 0
    assert convert("source=S", "out=T", f"overwrite={value}") == code


def test_synth_and_emit_refuse_unmarked(work, capsys):
    other = work / "Y"
    other.mkdir()
    (other / "keep.txt").write_text("keep")
    assert main(["synth", "adapter=minimax_dspark", "out=Y", "overwrite=true"]) == 2
    assert "not written by draftsmith" in one_error(capsys)
    pkg = work / "plugin"
    pkg.mkdir()
    assert main(["emit", "adapter=minimax_dspark", "target=trtllm", "out=plugin"]) == 0
    capsys.readouterr()
    emitted = [p for p in pkg.iterdir() if p.is_dir()]
    assert emitted and all((p / MARKER).is_file() for p in emitted)
    (emitted[0] / MARKER).unlink()
    (emitted[0] / "mine.py").write_text("# user code\n")
    assert main(["emit", "adapter=minimax_dspark", "target=trtllm", "out=plugin"]) == 2
    assert (emitted[0] / "mine.py").read_text() == "# user code\n"
    assert (other / "keep.txt").read_text() == "keep"
