"""Atomic publishing: an output folder is written in a temp dir beside it and renamed into
place (``renameat2`` NOREPLACE / EXCHANGE on Linux, plain renames elsewhere), so a killed
run leaves nothing half-written at the destination; :func:`clean_stale_temps` tidies up
after one.

Ownership of temp dirs: each is named ``.<out>.tmp-<pid>-<unique>`` and holds an owner file
(:data:`OWNER`: the pid and that process's start time). Only its owner removes a live
one; a later run removes it only when the owner is gone (pid dead, or reused by another
process). Stale temps are found by listing the parent and comparing names exactly (an
output named ``r*`` never matches ``run1``'s temps).

Signals: :func:`install_signal_handlers` turns SIGTERM and SIGHUP into the same
``KeyboardInterrupt`` as Ctrl-C, so every command's cleanup runs; the cleanup itself
(:func:`remove_temp`) runs with those signals blocked, so a second Ctrl-C cannot leave a
half-removed temp dir.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Callable, Optional

from ..errors import UserError
from .ownership import check_replaceable, marker_command, write_marker


def atomic_dir(out: Path, overwrite: bool, command: str, protect=()):
    """A temp dir beside ``out``, carrying draftsmith's ownership marker (written by
    ``command``); :func:`publish` renames it into place. An existing ``out`` is refused
    unless ``overwrite`` and :func:`~.ownership.check_replaceable` allow replacing it;
    ``protect`` lists the paths the command reads (never replaced, nor their ancestors)."""
    out = Path(out)
    if os.path.lexists(out):
        check_replaceable(out, protect, command)  # what overwrite=true could not replace, said first
        if not overwrite:
            raise UserError(f"out={out}: already exists (pass overwrite=true to replace it)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"out={out}: cannot create its parent folder ({e.strerror})") from None
    clean_stale_temps(out)
    tmp = Path(tempfile.mkdtemp(prefix=f"{_tmp_prefix(out)}{os.getpid()}-", dir=out.parent))
    (tmp / OWNER).write_text(json.dumps({"pid": os.getpid(), "start": _start_time(os.getpid())}) + "\n")
    write_marker(tmp, command)
    return tmp


#: the owner file inside a temp dir: ``{"pid": N, "start": <process start time or null>}``
OWNER = ".draftsmith-owner.json"


def _tmp_prefix(out: Path) -> str:
    return f".{out.name}.tmp-"


def _start_time(pid: int):
    """Process ``pid``'s start time (clock ticks since boot, from /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096).decode(errors="replace")
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _owner_alive(tmp: Path, pid_in_name: str) -> bool:
    """The process that made ``tmp`` is still running (same pid and start time)."""
    try:
        with open(tmp / OWNER, "rb") as f:
            owner = json.loads(f.read(4096))
        pid, start = int(owner["pid"]), owner.get("start")
    except (OSError, ValueError, KeyError, TypeError):
        if not pid_in_name.isdigit():
            return False
        pid, start = int(pid_in_name), None  # no owner file (yet): the name's pid decides
    if not _alive(pid):
        return False
    return start is None or _start_time(pid) in (None, start)


def remove_temp(tmp: Path) -> None:
    """Remove this process's temp dir with SIGINT/SIGTERM/SIGHUP blocked (a repeated Ctrl-C
    cannot leave it half-removed); the signals are delivered afterwards."""
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    except (AttributeError, ValueError, OSError):
        old = None
    try:
        _remove(Path(tmp))
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def clean_stale_temps(out: Path) -> None:
    """Tidy what an earlier, killed run left beside ``out``: its temp dirs (owner gone) are
    removed; an old output it had moved aside is put back if ``out`` is gone, else removed.
    Names are compared exactly (no glob: ``out`` may hold ``*``, ``?`` or ``[``)."""
    tmp_prefix, old_prefix = _tmp_prefix(out), f".{out.name}.old-"
    try:
        entries = sorted(os.listdir(out.parent))
    except OSError:
        return
    for name in entries:
        if name.startswith(tmp_prefix):
            p = out.parent / name
            if not _owner_alive(p, name[len(tmp_prefix):].split("-")[0]):
                _remove(p)
    for name in entries:
        if not name.startswith(old_prefix):
            continue
        p, pid = out.parent / name, name[len(old_prefix):]
        if not pid.isdigit():
            continue  # not ours: ours end in the pid alone
        if _alive(int(pid)):
            continue
        if not os.path.lexists(out):
            os.rename(p, out)  # killed between moving the old output aside and publishing
        else:
            _remove(p)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so that every cleanup path runs."""


def _raise_terminated(signum, frame):
    e = Terminated(signal.Signals(signum).name)
    e.exit_code = 128 + signum
    raise e


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP clean up like SIGINT (main thread only); SIGXFSZ (``ulimit -f``)
    is ignored so that an oversize write fails as an ``OSError`` (EFBIG) with a message."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _raise_terminated)
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """Linux ``renameat2``; False where the call or the flag is unsupported (then the caller
    falls back to plain renames). Raises ``FileExistsError`` for NOREPLACE onto an existing path."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        raise FileExistsError(err, os.strerror(err), str(dst))
    return False


_step_hook: Optional[Callable[[], None]] = None


def set_step_hook(hook: Optional[Callable[[], None]]) -> None:
    """Install ``hook``, called at every step point (``None`` removes it). Used by the
    interruption tests (tests/test_interrupt.py) to kill a run at an exact step."""
    global _step_hook
    _step_hook = hook


def step_point() -> None:
    """A point where a killed run must leave a consistent state: after each tensor written,
    after the config/index, and between the steps of :func:`publish`."""
    if _step_hook is not None:
        _step_hook()


def publish(tmp: Path, out: Path, overwrite: bool, protect=(), command: str | None = None) -> None:
    """Put the finished ``tmp`` at ``out``. An existing ``out`` is replaced only with
    ``overwrite`` and only when its marker names the same kind of output as ``tmp``'s
    (``command``, default: the one :func:`atomic_dir` wrote into ``tmp``), by an atomic
    exchange where the OS has one (else: moved aside, the new output renamed in, the old
    removed; :func:`clean_stale_temps` undoes a half-done swap)."""
    command = command if command is not None else marker_command(tmp)
    (tmp / OWNER).unlink(missing_ok=True)  # the pid in the name keeps it ours until renamed
    for f in sorted(tmp.rglob("*")):
        if not f.is_file():
            continue
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    step_point()
    if not os.path.lexists(out):
        try:
            if _renameat2(tmp, out, _RENAME_NOREPLACE):
                follow_umask(out)
                return
        except FileExistsError:
            pass  # appeared meanwhile: handled below
        else:
            os.rename(tmp, out)
            follow_umask(out)
            return
    if not overwrite:
        raise UserError(f"out={out}: already exists (pass overwrite=true to replace it)")
    check_replaceable(out, protect, command)  # again: it may have appeared or changed since atomic_dir
    if _renameat2(tmp, out, _RENAME_EXCHANGE):  # out is the new output at once; tmp holds the old
        follow_umask(out)
        step_point()
        remove_temp(tmp)
        return
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    os.rename(out, old)
    step_point()
    os.rename(tmp, out)
    follow_umask(out)
    step_point()
    _remove(old)


def current_umask() -> int:
    """The process umask: from /proc/self/status on Linux (no change to process state), else
    read by setting it and putting it back."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(out: Path) -> None:
    """Give a published folder the modes a plain ``mkdir``/``open`` would have had
    (``0o777``/``0o666`` less the umask: 0755/0644 by default), so that another user (a
    serving container) can read it; temp dirs stay private (0700) until published."""
    mask = current_umask()
    dmode, fmode = 0o777 & ~mask, 0o666 & ~mask
    os.chmod(out, dmode)
    for root, dirs, files in os.walk(out):
        for d in dirs:
            p = os.path.join(root, d)
            if not os.path.islink(p):
                os.chmod(p, dmode)
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                os.chmod(p, fmode)
