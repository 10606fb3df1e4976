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
scratch) have an **owner record** (written by :func:`make_owned_dir`): draftsmith's signature,
the folder's own name, the writing process's pid, start time and host, and a random token that
is also the tail of the folder's name. The record is a symbolic link *beside* the folder,
``<folder>`` + :data:`OWNER_SUFFIX`, whose target text is the record: a link is created with its
text in one step, before the folder, and removed after it, so a run killed at any instant leaves
either nothing or a folder (or a record alone) that the record names. Cleanup and stale-folder
recovery touch a folder only when :func:`read_owner` finds such a record (a copy or a rename of
the folder, or a user's folder whose name merely looks like ours, has none); a record from another
host is never judged stale. Where the file system has no symbolic links the record is a small
file written right after it is created (a kill in between leaves a record no run reads as ours).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import socket
import stat
from pathlib import Path
from typing import Iterable

from ... import __version__
from ..errors import UserError
from .remove_tree import remove_tree

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


#: the owner record of a folder ``<name>``: the link (or file) ``<name>`` + this suffix beside it
OWNER_SUFFIX = ".draftsmith-owner"
#: largest owner record read (bytes)
OWNER_BYTES = 4096
#: errors of ``symlink`` on a file system without symbolic links (the record is then a file)
_NO_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def owner_path(folder: Path) -> Path:
    """Where ``folder``'s owner record lies: beside it, named ``<folder name>`` + :data:`OWNER_SUFFIX`."""
    folder = Path(folder)
    return folder.with_name(folder.name + OWNER_SUFFIX)


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


def _write_record(path: Path, record: dict) -> None:
    """Create the record ``path`` (a new name; ``FileExistsError`` otherwise) holding ``record``."""
    text = json.dumps(record, sort_keys=True)
    try:
        os.symlink(text, path)
        return
    except OSError as e:
        if isinstance(e, FileExistsError) or e.errno not in _NO_LINKS:
            raise
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    with open(os.open(path, flags, 0o600), "w") as f:
        f.write(text + "\n")


def make_owned_dir(parent: Path, prefix: str, kind: str) -> Path:
    """A new private folder ``<parent>/<prefix><pid>-<token>`` (``kind``: what it is for, e.g.
    ``temp`` or ``scratch``), its owner record created first. The names are new (``O_EXCL``
    semantics of ``symlink`` and ``mkdir``): an existing folder or record is never reused."""
    parent, pid = Path(parent), os.getpid()
    for _ in range(100):
        token = secrets.token_hex(8)
        d = parent / f"{prefix}{pid}-{token}"
        if os.path.lexists(d):
            continue
        record = {"written_by": "draftsmith", "kind": kind, "name": d.name, "pid": pid, "start": start_time(pid),
                  "host": _host(), "token": token}
        try:
            _write_record(owner_path(d), record)
        except FileExistsError:
            continue
        try:
            os.mkdir(d, 0o700)
        except BaseException as e:
            os.unlink(owner_path(d))
            if isinstance(e, FileExistsError):
                continue
            raise
        return d
    raise FileExistsError(f"{parent}: no free name for a temporary folder {prefix}{pid}-*")


def read_record(path: Path, name: str) -> dict | None:
    """The owner record at ``path`` (a link's text, or a regular file of at most
    :data:`OWNER_BYTES`, of this user) when draftsmith wrote it for the folder ``name``; else None.
    A link is read, never followed."""
    try:
        st = os.lstat(path)
        if st.st_uid != os.getuid():
            return None
        if stat.S_ISLNK(st.st_mode):
            if st.st_size > OWNER_BYTES:
                return None
            raw = os.readlink(path).encode()
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return None
                raw = os.read(fd, OWNER_BYTES + 1)
            finally:
                os.close(fd)
        else:
            return None
        if len(raw) > OWNER_BYTES:
            return None
        data = json.loads(raw or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("written_by") != "draftsmith":
        return None
    pid, token, host = data.get("pid"), data.get("token"), data.get("host")
    if not (type(pid) is int and isinstance(token, str) and len(token) >= 16 and isinstance(host, str)):
        return None
    if data.get("name") != name or not name.endswith(f"{pid}-{token}"):
        return None
    return data


def _own_folder(folder: Path) -> bool:
    """``folder`` is a real directory (not a link) of this user."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def read_owner(folder: Path) -> dict | None:
    """``folder``'s owner record when it is a real folder of this user and the record beside it
    is one draftsmith wrote for exactly this folder (its name, its token); None otherwise."""
    folder = Path(folder)
    return read_record(owner_path(folder), folder.name) if _own_folder(folder) else None


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


def stale_owned(parent: Path, prefix: str) -> list[Path]:
    """The folders ``<parent>/<prefix>...`` (present, or already removed but for their record)
    whose owner record is intact and whose owner is gone; names are compared exactly."""
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    found = []
    for name in names:
        if not (name.startswith(prefix) and name.endswith(OWNER_SUFFIX)):
            continue
        folder = Path(parent) / name[: -len(OWNER_SUFFIX)]
        record = read_record(Path(parent) / name, folder.name)
        if record is None or not owner_gone(record):
            continue
        if os.path.lexists(folder) and not _own_folder(folder):
            continue  # the name now holds something else: not ours to remove
        found.append(folder)
    return found


def is_own_live(folder: Path) -> bool:
    """``folder`` has an owner record of this very process."""
    record = read_owner(folder)
    return record is not None and record["pid"] == os.getpid() and record.get("host") == _host() \
        and record.get("start") == start_time(os.getpid())


def remove_owned(folder: Path) -> None:
    """Remove the owned ``folder`` (any depth; it may be gone already), then its owner record;
    best effort: what cannot be removed, or was not yet when the run was killed, keeps the record
    for a later run. A record that is not draftsmith's for this folder is left alone."""
    folder = Path(folder)
    record = read_record(owner_path(folder), folder.name)
    try:
        remove_tree(folder)
    except FileNotFoundError:
        pass
    except OSError:
        return
    if record is not None:
        try:
            os.unlink(owner_path(folder))
        except OSError:
            pass
