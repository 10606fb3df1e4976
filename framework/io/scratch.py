"""Scratch folders that never outlive a run.

A scratch folder (a conversion ``draft``/``eval`` make of a source checkpoint, the converted
copy ``convert to=`` exports from) is made by :func:`make_scratch`: named
``<prefix><pid>-<random>`` and holding the same owner file as :func:`~.publish.atomic_dir`'s
temp dirs (pid and process start time). Its run removes it on every exit, signals included
(:func:`~.publish.remove_temp`); one killed by SIGKILL leaves it behind, and the next run
with the same prefix in the same folder removes it, because its owner is gone. Only real
folders owned by this user whose names start with the prefix are ever considered.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from .publish import OWNER, _owner_alive, _remove, _start_time, remove_temp

#: the prefix of ``draft``'s and ``eval``'s scratch conversions in TMPDIR
RUN_SCRATCH = "draftsmith-scratch-"


def clean_stale_scratch(prefix: str, parent: Path) -> list[Path]:
    """Remove the scratch folders under ``parent`` named ``prefix*`` whose owner is gone;
    return those removed."""
    removed = []
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return removed
    for name in names:
        if not name.startswith(prefix):
            continue
        p = Path(parent) / name
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        if not _owner_alive(p, name[len(prefix):].split("-")[0]):
            _remove(p)
            removed.append(p)
    return removed


def make_scratch(prefix: str, parent: Optional[Path] = None) -> Path:
    """A new, private scratch folder ``<parent>/<prefix><pid>-<random>`` (``parent``: TMPDIR
    by default), after removing stale ones of the same prefix. The caller removes it with
    :func:`~.publish.remove_temp` (or uses :func:`scratch`)."""
    parent = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    clean_stale_scratch(prefix, parent)
    d = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
    (d / OWNER).write_text(json.dumps({"pid": os.getpid(), "start": _start_time(os.getpid())}) + "\n")
    return d


@contextmanager
def scratch(prefix: str = RUN_SCRATCH, parent: Optional[Path] = None) -> Iterator[Path]:
    """:func:`make_scratch`, removed when the block exits (errors and signals included)."""
    d = make_scratch(prefix, parent)
    try:
        yield d
    finally:
        remove_temp(d)
