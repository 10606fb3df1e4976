"""Scratch folders that never outlive a run.

A scratch folder (a conversion ``draft``/``eval`` make of a source checkpoint, the converted
copy ``convert to=`` exports from) is made by :func:`make_scratch`: named
``<prefix><pid>-<token>``, with draftsmith's owner record beside it
(:func:`~.ownership.make_owned_dir`: pid, start time, host, the folder's name and token). Its
run removes it on every exit, signals included (:func:`~.publish.remove_temp`); one killed by
SIGKILL leaves it behind, and the next run with the same prefix in the same folder removes
it, because its record is intact and its owner gone. A folder whose name merely starts with
the prefix (another program's, a copy, one without the record) is never touched.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from .ownership import make_owned_dir, remove_owned, stale_owned
from .publish import remove_temp

#: the prefix of ``draft``'s and ``eval``'s scratch conversions in TMPDIR
RUN_SCRATCH = "draftsmith-scratch-"


def clean_stale_scratch(prefix: str, parent: Path) -> list[Path]:
    """Remove the scratch folders under ``parent`` named ``prefix*`` whose draftsmith owner
    record is intact and whose owner is gone; return those removed."""
    removed = stale_owned(Path(parent), prefix)
    for p in removed:
        remove_owned(p)
    return removed


def make_scratch(prefix: str, parent: Optional[Path] = None) -> Path:
    """A new, private scratch folder ``<parent>/<prefix><pid>-<token>`` (``parent``: TMPDIR
    by default), after removing stale ones of the same prefix. The caller removes it with
    :func:`~.publish.remove_temp` (or uses :func:`scratch`)."""
    parent = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    clean_stale_scratch(prefix, parent)
    return make_owned_dir(parent, prefix, "scratch")


@contextmanager
def scratch(prefix: str = RUN_SCRATCH, parent: Optional[Path] = None) -> Iterator[Path]:
    """:func:`make_scratch`, removed when the block exits (errors and signals included)."""
    d = make_scratch(prefix, parent)
    try:
        yield d
    finally:
        remove_temp(d)
