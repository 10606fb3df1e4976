"""What draftsmith may replace: its ownership marker and the one overwrite rule.

Every folder that ``convert``, ``export``, ``emit`` and ``synth`` create holds a marker file
(:data:`MARKER`) naming the command that wrote it. ``overwrite=true`` replaces an existing
destination only when

- it is a real directory (not a symlink, not a file) that carries the marker of the same kind
  of output (:data:`KINDS`: ``emit`` never replaces a checkpoint ``convert`` wrote), or is empty;
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

from ... import __version__
from ..errors import UserError

MARKER = ".draftsmith-output"

#: command written in a marker -> the kind of output it names; a folder is replaced only by a
#: command of the same kind (``convert`` and its ``to=`` export both write checkpoints)
KINDS = {"convert": "converted checkpoint", "export": "converted checkpoint", "synth": "synthetic checkpoint",
         "emit": "TensorRT-LLM package"}


def write_marker(folder: Path, command: str) -> None:
    """Mark ``folder`` (a temp dir about to be published) as written by draftsmith ``command``."""
    text = json.dumps({"written_by": "draftsmith", "version": __version__, "command": command}, sort_keys=True)
    (Path(folder) / MARKER).write_text(text + "\n")


def marker_command(folder: Path) -> str | None:
    """The command named by ``folder``'s draftsmith marker (a regular file of at most 4 KiB,
    not a link); None when there is none or it is not draftsmith's."""
    p = Path(folder) / MARKER
    try:
        if p.is_symlink() or not p.is_file() or p.stat().st_size > 4096:
            return None
        data = json.loads(p.read_text())
        if data.get("written_by") != "draftsmith":
            return None
        command = data.get("command")
        return command if isinstance(command, str) else ""
    except (OSError, ValueError, AttributeError):
        return None


def is_marked(folder: Path, command: str | None = None) -> bool:
    """``folder`` carries draftsmith's marker; with ``command``, one naming the same kind of
    output (:data:`KINDS`)."""
    found = marker_command(folder)
    if found is None:
        return False
    return command is None or KINDS.get(found, found) == KINDS.get(command, command)


def _real(p: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(p))))


def _within(inner: Path, outer: Path) -> bool:
    """``inner`` is ``outer`` or lies below it (both resolved)."""
    return inner == outer or outer in inner.parents


def check_replaceable(out: Path, protect: Iterable[Path] = (), command: str | None = None) -> None:
    """Raise :class:`UserError` unless ``overwrite=true`` may replace the existing ``out``
    (with ``command``: only a folder whose marker names the same kind of output)."""
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
    found = marker_command(out)
    if found is not None:
        if command is None or KINDS.get(found, found) == KINDS.get(command, command):
            return
        raise UserError(
            f"{where}: holds a {KINDS.get(found, found or 'draftsmith output')} written by `draftsmith {found or '?'}`; "
            f"overwrite=true in `draftsmith {command}` replaces only a {KINDS.get(command, command)}: "
            "choose another out=")
    try:
        empty = not any(os.scandir(out))
    except OSError as e:
        raise UserError(f"{where}: cannot be read ({e.strerror})") from None
    if not empty:
        raise UserError(
            f"{where}: exists and was not written by draftsmith (no {MARKER} marker); "
            "overwrite=true replaces only folders draftsmith wrote, or empty ones: choose another out="
        )

