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

Temporary folders (the temp dir an output is built in, ``draft``'s and ``convert to=``'s
scratch) carry an **owner record** (:data:`OWNER`, written by :func:`make_owned_dir`): draftsmith's
signature, the folder's own name, the writing process's pid, start time and host, and a random
token that is also the tail of the folder's name. Cleanup and stale-folder recovery touch a
folder only when :func:`read_owner` finds such a record (a copy or a rename of the folder, or
a user's folder whose name merely looks like ours, does not match); a record from another host
is never judged stale.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import stat
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


#: the owner record inside a temporary folder draftsmith made (see the module docstring)
OWNER = ".draftsmith-owner.json"
#: largest owner record read
OWNER_BYTES = 4096


def start_time(pid: int):
    """Process ``pid``'s start time (clock ticks since boot, from /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read(4096).decode(errors="replace")
        return int(text.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _host() -> str:
    return socket.gethostname()


def make_owned_dir(parent: Path, prefix: str, kind: str) -> Path:
    """A new private folder ``<parent>/<prefix><pid>-<token>`` holding its owner record
    (``kind``: what it is for, e.g. ``temp`` or ``scratch``). The name is new (``O_EXCL``
    semantics of ``mkdir``): an existing folder of any name is never reused."""
    parent, pid = Path(parent), os.getpid()
    for _ in range(100):
        token = secrets.token_hex(8)
        d = parent / f"{prefix}{pid}-{token}"
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        record = {"written_by": "draftsmith", "kind": kind, "name": d.name, "pid": pid, "start": start_time(pid),
                  "host": _host(), "token": token}
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(d / OWNER, flags, 0o600)
        with open(fd, "w") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        return d
    raise FileExistsError(f"{parent}: no free name for a temporary folder {prefix}{pid}-*")


def read_owner(folder: Path) -> dict | None:
    """``folder``'s owner record when it is a real folder of this user holding a record
    draftsmith wrote for exactly this folder (its name, its token); None otherwise."""
    folder = Path(folder)
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return None
        fd = os.open(folder / OWNER, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, OWNER_BYTES + 1)
        if len(raw) > OWNER_BYTES:
            return None
        data = json.loads(raw or b"null")
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or data.get("written_by") != "draftsmith":
        return None
    pid, token, host = data.get("pid"), data.get("token"), data.get("host")
    if not (type(pid) is int and isinstance(token, str) and len(token) >= 16 and isinstance(host, str)):
        return None
    if data.get("name") != folder.name or not folder.name.endswith(f"{pid}-{token}"):
        return None
    return data


def owner_gone(record: dict) -> bool:
    """The process that wrote ``record`` is known to have ended: same host, and its pid is
    dead or now another process (a different start time). Another host's record: never."""
    if record.get("host") != _host():
        return False
    pid = record["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # alive, another user's
    start = record.get("start")
    return start is not None and start_time(pid) not in (None, start)


def stale_owned(folder: Path, prefix: str) -> bool:
    """``folder`` (named ``prefix...``) carries draftsmith's owner record and its owner is gone."""
    if not Path(folder).name.startswith(prefix):
        return False
    record = read_owner(folder)
    return record is not None and owner_gone(record)


def is_own_live(folder: Path) -> bool:
    """``folder`` carries an owner record of this very process."""
    record = read_owner(folder)
    return record is not None and record["pid"] == os.getpid() and record.get("host") == _host() \
        and record.get("start") == start_time(os.getpid())
