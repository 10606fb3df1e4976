"""Removing a folder tree of any depth, without following links and without recursion.

:func:`remove_tree` walks the tree depth first holding one directory descriptor at a time
(``openat`` with ``O_NOFOLLOW`` going down, ``openat(fd, "..")`` going up, checked against the
device and inode recorded on the way down), so a 100,000-deep tree needs neither Python
recursion (``shutil.rmtree`` recurses in Python 3.11) nor one open descriptor per level, nor a
path longer than ``PATH_MAX``. A symbolic link inside is removed as a link (its target is never
touched); a directory swapped for something else while the walk runs stops it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _clear(fd: int) -> list[str]:
    """Unlink every non-directory entry of the directory ``fd``; return its subdirectories' names."""
    subdirs = []
    with os.scandir(fd) as it:
        entries = list(it)
    for e in entries:
        try:
            is_dir = e.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            subdirs.append(e.name)
        else:
            try:
                os.unlink(e.name, dir_fd=fd)
            except FileNotFoundError:
                pass
    return subdirs


def remove_tree(path: str | Path) -> None:
    """Remove the directory ``path`` and everything below it (a link at ``path`` itself is
    unlinked, never followed). Raises ``OSError`` when something cannot be removed."""
    path = os.fspath(path)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    fd = os.open(path, _DIR_FLAGS)
    try:
        if _ident(os.fstat(fd)) != _ident(st):
            raise OSError(errno.ESTALE, "changed while being removed", path)
        # frames: (identity of the directory, name of the child being removed, its pending subdirectories)
        stack: list[tuple[tuple[int, int], list[str]]] = [(_ident(st), _clear(fd))]
        names: list[str] = []
        while stack:
            ident, pending = stack[-1]
            if pending:
                name = pending.pop()
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):  # became a link or a file: remove the entry
                        os.unlink(name, dir_fd=fd)
                        continue
                    raise
                os.close(fd)
                fd = child
                names.append(name)
                stack.append((_ident(os.fstat(fd)), _clear(fd)))
                continue
            stack.pop()
            if not stack:
                break
            parent = os.open("..", _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
            os.close(fd)
            fd = parent
            if _ident(os.fstat(fd)) != stack[-1][0]:
                raise OSError(errno.ESTALE, "a folder was moved while being removed", path)
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)
