"""Writing one output file: only what draftsmith wrote is replaced, nothing is half-written.

:func:`write_file` is the one way a command writes a single file (``schema out=``, ``docs``,
``init out=``, ``draft dump=``, ``eval plot=``):

- an existing ``out`` is refused unless ``overwrite`` and ``owned(out)`` says that this
  command's kind of output is there (a regular file, not a symbolic link, whose bounded head
  carries the command's own signature: see :func:`head_has`);
- the bytes go to a temp file beside ``out``, created with ``O_CREAT | O_EXCL | O_NOFOLLOW``
  under an unpredictable name (``.<name>.tmp-<pid>-<random>``: a link planted there is never
  followed, an existing file never reused), fsync'ed, then renamed onto ``out`` (``renameat2``
  NOREPLACE when ``out`` was absent, so a path that appeared meanwhile is re-checked);
- on every error (a full disk, a signal) the temp file is removed and ``out`` is untouched.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Callable

from ..errors import UserError
from .publish import _RENAME_NOREPLACE, _renameat2, current_umask, remove_temp

#: how much of an existing file the ownership check reads
HEAD_BYTES = 4096


def head_has(path: Path, signature: bytes, limit: int = HEAD_BYTES) -> bool:
    """``path`` is a regular file (not a link) whose first ``limit`` bytes contain ``signature``."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return signature in os.read(fd, limit)
    except OSError:
        return False
    finally:
        os.close(fd)


def check_file_replaceable(out: Path, key: str, overwrite: bool, command: str,
                           owned: Callable[[Path], bool]) -> None:
    """One-line :class:`UserError` unless the existing ``out`` may be replaced."""
    where = f"{key}={out}"
    if not overwrite:
        raise UserError(f"{where}: already exists (pass overwrite=true to replace a file `draftsmith {command}` wrote)")
    if os.path.islink(out):
        raise UserError(f"{where}: is a symbolic link; overwrite=true replaces only files `draftsmith {command}` wrote")
    if not owned(out):
        raise UserError(f"{where}: exists and was not written by draftsmith {command}; overwrite=true replaces "
                        "only files that command wrote: choose another path")


def write_file(out: str | Path, data: bytes, *, key: str, command: str, overwrite: bool,
               owned: Callable[[Path], bool], protect: tuple = ()) -> None:
    """Write ``data`` at ``out`` atomically (see the module docstring); ``key`` names the
    command-line key in messages; ``protect``: files the command reads (never written)."""
    out = Path(out)
    real = os.path.realpath(out)
    for p in protect:
        if p is not None and os.path.exists(p) and os.path.realpath(p) == real:
            raise UserError(f"{key}={out}: is the input {p}; refusing to overwrite it")
    if os.path.lexists(out):
        if os.path.isdir(out) and not os.path.islink(out):
            raise UserError(f"{key}={out}: is a folder; expected a file name")
        check_file_replaceable(out, key, overwrite, command, owned)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{key}={out}: cannot create its parent folder ({e.strerror})") from None
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
    except OSError as e:
        raise UserError(f"{key}={out}: cannot write beside it ({e.strerror})") from None
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
            os.fchmod(fd, 0o666 & ~current_umask())
        finally:
            os.close(fd)
        _place(tmp, out, key, overwrite, command, owned)
    except OSError as e:
        remove_temp(tmp)
        raise UserError(f"{key}={out}: not written ({e.strerror or e}); nothing changed") from None
    except BaseException:
        remove_temp(tmp)
        raise


def _place(tmp: Path, out: Path, key: str, overwrite: bool, command: str, owned) -> None:
    if not os.path.lexists(out):
        try:
            if _renameat2(tmp, out, _RENAME_NOREPLACE):
                return
        except FileExistsError:
            pass  # appeared meanwhile: checked below
        else:
            os.rename(tmp, out)
            return
    check_file_replaceable(out, key, overwrite, command, owned)  # again: it may have changed
    os.replace(tmp, out)


def owned_safetensors(command: str) -> Callable[[Path], bool]:
    """An ``owned`` test for safetensors files: a regular file whose header (at most 1 MiB,
    read bounded) has ``__metadata__.written_by == "draftsmith <command>"``."""
    import json
    import struct

    def owned(p: Path) -> bool:
        try:
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode):
                return False
            with open(os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)), "rb") as f:
                head = f.read(8)
                if len(head) != 8:
                    return False
                (n,) = struct.unpack("<Q", head)
                if n > 1 << 20:
                    return False
                meta = json.loads(f.read(n)).get("__metadata__") or {}
            return meta.get("written_by") == f"draftsmith {command}"
        except (OSError, ValueError, AttributeError, struct.error):
            return False

    return owned
