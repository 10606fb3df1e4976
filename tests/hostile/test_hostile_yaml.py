"""Spec YAML bounded before anything copies it (issue 46 point 3): aliases, the bytes of text
the document expands to through aliases, and key lengths, each tested just under and just over
its bound; an alias bomb under the node limit is refused by ``docs`` before it writes.

The expanded size of a test document is computed independently of the loader: from the
scanner's scalar tokens (each written scalar once) plus the aliased scalar's bytes once per
alias.
"""

from __future__ import annotations

import contextlib
import io
import time

import pytest
import yaml

from draftsmith.framework.cli.main import main
from draftsmith.framework.spec.yaml_lines import (MAX_YAML_ALIASES, MAX_YAML_EXPANDED_BYTES, MAX_YAML_KEY_CHARS,
                                                  load_yaml)
from support.reliability_log import record

AREA = "yaml"
HEAD = "name: bomb\nextends: minimax_dspark\n"


def _scalar_bytes(text: str) -> int:
    """Bytes of every scalar as written (the scanner's tokens; aliases not followed)."""
    return sum(len(t.value.encode()) for t in yaml.scan(text) if isinstance(t, yaml.ScalarToken))


def bomb(refs: int, size: int, pad: int = 0) -> str:
    """``description`` anchors a ``size``-byte string that ``docs.notes`` references ``refs``
    times, plus one ``pad``-byte note."""
    notes = ", ".join(["*a"] * refs + [f'"{"p" * pad}"'])
    return (HEAD + f"description: &a \"{'x' * size}\"\n"
            + f"docs:\n  model: m\n  example_checkpoint: e\n  notes: [{notes}]\n")


def expanded(text: str, refs: int, size: int) -> int:
    return _scalar_bytes(text) + refs * size


def test_expanded_bytes_just_under_and_over(tmp_path):
    refs, size = 40, 100_000
    base = expanded(bomb(refs, size), refs, size)
    pad = MAX_YAML_EXPANDED_BYTES - base
    assert pad > 0
    under = bomb(refs, size, pad)
    assert expanded(under, refs, size) == MAX_YAML_EXPANDED_BYTES
    (tmp_path / "under.yaml").write_text(under)
    data, _ = load_yaml(tmp_path / "under.yaml")
    assert len(data["docs"]["notes"]) == refs + 1
    over = bomb(refs, size, pad + 1)
    (tmp_path / "over.yaml").write_text(over)
    with pytest.raises(ValueError, match="expand to more than .* bytes"):
        load_yaml(tmp_path / "over.yaml")
    record(AREA, "alias amplification of a long string (bytes through aliases)", "refused past 4 MiB, one line")


def test_alias_count_just_under_and_over(tmp_path):
    for n, ok in ((MAX_YAML_ALIASES, True), (MAX_YAML_ALIASES + 1, False)):
        p = tmp_path / f"a{n}.yaml"
        p.write_text(bomb(n, 10))
        if ok:
            assert len(load_yaml(p)[0]["docs"]["notes"]) == n + 1
        else:
            with pytest.raises(ValueError, match=f"more than {MAX_YAML_ALIASES} aliases"):
                load_yaml(p)
    record(AREA, "more aliases than the bound", "refused, one line with the line number")


def test_key_length_just_under_and_over(tmp_path):
    for n, ok in ((MAX_YAML_KEY_CHARS, True), (MAX_YAML_KEY_CHARS + 1, False)):
        p = tmp_path / f"k{n}.yaml"
        p.write_text(HEAD + f"synth:\n  tiny:\n    ? {'k' * n}\n    : 1\n")  # an explicit key: no 1024 limit
        if ok:
            assert "k" * n in load_yaml(p)[0]["synth"]["tiny"]
        else:
            with pytest.raises(ValueError, match=f"a key of {n} characters"):
                load_yaml(p)
    record(AREA, "a mapping key longer than the bound", "refused, one line with the line number")


def test_docs_refuses_an_alias_bomb_before_writing(tmp_path):
    """A 5 MB expansion from a 5 KB string and 1,000 aliases (3,000 nodes: under the node
    limit) once made ``docs`` write it out; now: exit 2 in seconds, one line naming the file,
    nothing written."""
    ad = tmp_path / "ad"
    ad.mkdir()
    (ad / "bomb.yaml").write_text(bomb(1000, 5000))
    e = io.StringIO()
    t = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(e):
        rc = main(["docs", f"adapter_dir={ad}", f"out={tmp_path / 'docs'}"])
    lines = e.getvalue().strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "bomb.yaml" in lines[0] and "bytes" in lines[0], lines
    assert not (tmp_path / "docs").exists() and time.monotonic() - t < 30
    record(AREA, "alias bomb under the node limit (docs)", "exit 2, one line, nothing written")
