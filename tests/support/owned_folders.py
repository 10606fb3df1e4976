"""Test helpers: folders with draftsmith's owner record for a process that has ended
(what a SIGKILLed run leaves), and snapshots of folders draftsmith must never touch."""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

from draftsmith.framework.io.ownership import _host, owner_path


def dead_pid() -> int:
    """The pid of a process that has just ended."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def plant_owned(parent: Path, prefix: str, pid: int | None = None, start=None, host: str | None = None) -> Path:
    """``<parent>/<prefix><pid>-<token>`` with an owner record as draftsmith writes it (a link
    ``<name>.draftsmith-owner`` beside it whose text is the record; owner: ``pid``, by default one
    that has ended)."""
    pid = dead_pid() if pid is None else pid
    token = secrets.token_hex(8)
    d = Path(parent) / f"{prefix}{pid}-{token}"
    d.mkdir()
    os.symlink(json.dumps({"written_by": "draftsmith", "kind": "temp", "name": d.name, "pid": pid, "start": start,
                           "host": host or _host(), "token": token}), owner_path(d))
    return d


def snapshot(root: Path) -> dict:
    """Every entry under ``root`` (itself included): relative path -> (kind, mode, bytes or link target)."""
    root = Path(root)
    out = {".": ("dir", stat.S_IMODE(os.lstat(root).st_mode), None)}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", stat.S_IMODE(st.st_mode), os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), None)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
    return out
