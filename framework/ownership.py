"""What draftsmith may replace: its ownership marker and the one overwrite rule.

Every folder that ``convert``, ``export``, ``emit`` and ``synth`` create holds a marker file
(:data:`MARKER`). ``overwrite=true`` replaces an existing destination only when

- it is a real directory (not a symlink, not a file) that carries the marker, or is empty;
- it is not, does not contain and does not lie inside any protected path (the sources the
  command reads);
- it is not and does not contain the current directory or the home directory.

Everything else is refused with one line naming the destination and the reason.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from .errors import UserError

MARKER = ".draftsmith-output"


def write_marker(folder: Path, command: str) -> None:
    """Mark ``folder`` (a temp dir about to be published) as written by draftsmith ``command``."""
    from draftsmith import __version__

    text = json.dumps({"written_by": "draftsmith", "version": __version__, "command": command}, sort_keys=True)
    (Path(folder) / MARKER).write_text(text + "\n")


def is_marked(folder: Path) -> bool:
    """``folder`` carries a marker that parses as draftsmith's."""
    p = Path(folder) / MARKER
    try:
        if not p.is_file() or p.stat().st_size > 4096:
            return False
        return json.loads(p.read_text()).get("written_by") == "draftsmith"
    except (OSError, ValueError, AttributeError):
        return False


def _real(p: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(p))))


def _within(inner: Path, outer: Path) -> bool:
    """``inner`` is ``outer`` or lies below it (both resolved)."""
    return inner == outer or outer in inner.parents


def check_replaceable(out: Path, protect: Iterable[Path] = ()) -> None:
    """Raise :class:`UserError` unless ``overwrite=true`` may replace the existing ``out``."""
    out = Path(out)
    where = f"out={out}"
    if os.path.islink(out):
        raise UserError(f"{where}: is a symbolic link; overwrite=true replaces only folders draftsmith wrote")
    if not out.is_dir():
        raise UserError(f"{where}: exists and is not a folder; overwrite=true replaces only folders draftsmith wrote")
    real = _real(out)
    for p in protect:
        if p is None:
            continue
        src = _real(Path(p))
        if _within(src, real):
            raise UserError(f"{where}: is or contains the source {p}; refusing to overwrite it")
        if _within(real, src):
            raise UserError(f"{where}: lies inside the source {p}; refusing to overwrite it")
    for label, p in (("current directory", Path.cwd()), ("home directory", Path.home())):
        if _within(_real(p), real):
            raise UserError(f"{where}: is or contains the {label} ({p}); refusing to overwrite it")
    if is_marked(out):
        return
    try:
        empty = not any(os.scandir(out))
    except OSError as e:
        raise UserError(f"{where}: cannot be read ({e.strerror})") from None
    if not empty:
        raise UserError(
            f"{where}: exists and was not written by draftsmith (no {MARKER} marker); "
            "overwrite=true replaces only folders draftsmith wrote, or empty ones: choose another out="
        )

