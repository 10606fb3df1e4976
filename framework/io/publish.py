"""Atomic publishing: an output folder is built in a temp dir beside it and renamed into
place (``renameat2`` NOREPLACE / EXCHANGE on Linux, plain renames elsewhere), so a killed
run leaves nothing half-written at the destination; :func:`clean_stale_temps` tidies up
after one.

Ownership of temp dirs: the output is built in ``.<out>.tmp-<pid>-<token>/`` + :data:`BUILD`;
the outer folder (the *wrapper*) has an owner record beside it
(:func:`~.ownership.make_owned_dir`: created before the wrapper, removed after it), and
everything a replace moves away (the old output, swapped out by the exchange or moved aside
without ``renameat2``) moves *into* the wrapper, never beside ``out``. So at every instant each
folder beside ``out`` that draftsmith made has its record, the published output has none, and
a later run removes a wrapper only when its record is intact and its owner gone
(:func:`~.ownership.stale_owned`). A folder whose name merely looks like a temp dir
(``.o.tmp-notes``) or an old backup (``.o.old-20250101``) is never read, moved or removed.
Stale temps are found by listing the parent and comparing names exactly (an output named
``r*`` never matches ``run1``'s temps).

Signals: :func:`install_signal_handlers` turns SIGTERM and SIGHUP into the same
``KeyboardInterrupt`` as Ctrl-C, so every command's cleanup runs; the cleanup itself
(:func:`remove_temp`) runs with those signals blocked, so a second Ctrl-C cannot leave a
half-removed temp dir. Removal is :func:`~.remove_tree.remove_tree` (any depth).
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
from pathlib import Path
from typing import Callable, Optional

from ..errors import UserError
from .ownership import (check_replaceable, is_own_live, make_owned_dir, marker_command, remove_owned, stale_owned,
                        write_marker)

#: the folder inside a wrapper where the output is built (what :func:`atomic_dir` returns)
BUILD = "build"
#: where the fallback swap (no ``renameat2``) moves the old output: inside the wrapper
ASIDE = "old"


def atomic_dir(out: Path, overwrite: bool, command: str, protect=()):
    """A folder to build ``out`` in (``<wrapper>/build``; the wrapper lies beside ``out``, its
    owner record beside the wrapper), marked as written by ``command``; :func:`publish` renames
    it into place. An existing ``out`` is refused unless ``overwrite`` and
    :func:`~.ownership.check_replaceable` allow replacing it; ``protect`` lists the paths the
    command reads (never replaced, nor their ancestors)."""
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
    wrapper = make_owned_dir(out.parent, _tmp_prefix(out), "temp")
    tmp = wrapper / BUILD
    os.mkdir(tmp, 0o700)
    write_marker(tmp, command)
    return tmp


def _tmp_prefix(out: Path) -> str:
    return f".{out.name}.tmp-"


def _wrapper(tmp: Path) -> Path | None:
    """The owned wrapper of this process around ``tmp`` (an :func:`atomic_dir` folder), or None."""
    tmp = Path(tmp)
    return tmp.parent if tmp.name == BUILD and is_own_live(tmp.parent) else None


def remove_temp(tmp: Path) -> None:
    """Remove this process's temp dir (with its wrapper, for an :func:`atomic_dir` folder),
    scratch folder or temp file, with SIGINT/SIGTERM/SIGHUP blocked (a repeated Ctrl-C cannot
    leave it half-removed); the signals are delivered afterwards."""
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    except (AttributeError, ValueError, OSError):
        old = None
    try:
        remove_owned(_wrapper(tmp) or Path(tmp))
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def clean_stale_temps(out: Path) -> None:
    """Tidy what an earlier, killed run left beside ``out``: its wrappers (owner record intact,
    owner gone) are removed, after putting back an old output a fallback swap had moved into
    one when ``out`` is gone. Nothing without draftsmith's owner record is touched. Names are
    compared exactly (no glob: ``out`` may hold ``*``, ``?`` or ``[``)."""
    for p in stale_owned(out.parent, _tmp_prefix(out)):
        aside = p / ASIDE
        if os.path.isdir(aside) and not os.path.islink(aside) and not os.path.lexists(out):
            os.rename(aside, out)  # killed between moving the old output aside and publishing the new
        remove_owned(p)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so that every cleanup path runs."""


def _raise_terminated(signum, frame):
    e = Terminated(signal.Signals(signum).name)
    e.exit_code = 128 + signum
    raise e


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP clean up like SIGINT (main thread only); SIGXFSZ (``ulimit -f``)
    is ignored so that an oversize write fails as an ``OSError`` (EFBIG) with a message.
    An interrupt that lands inside a finalizer (``__del__``, a weakref callback), where Python
    only prints "Exception ignored", is delivered again (:func:`_redeliver_swallowed`)."""
    import sys
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _raise_terminated)
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if getattr(sys.unraisablehook, "__wrapped__", None) is None:
        sys.unraisablehook = _redeliver_swallowed(sys.unraisablehook)


#: seconds before a swallowed interrupt is sent again
REDELIVER_S = 0.05


def _redeliver_swallowed(previous):
    """An ``unraisablehook`` that sends again a Ctrl-C / SIGTERM / SIGHUP swallowed by a
    finalizer, from a helper thread after :data:`REDELIVER_S`, so that its handler runs in the
    main thread once the finalizer has returned (one that lands in a finalizer again is sent
    again); every other unraisable exception goes to ``previous``."""
    import threading

    def hook(unraisable):
        exc = unraisable.exc_value
        if isinstance(exc, KeyboardInterrupt):
            signum = getattr(exc, "exit_code", 128 + signal.SIGINT) - 128
            timer = threading.Timer(REDELIVER_S, os.kill, args=(os.getpid(), signum))
            timer.daemon = True
            timer.start()
            return
        previous(unraisable)

    hook.__wrapped__ = previous
    return hook


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
    interruption tests (tests/io/test_interrupt.py) to kill a run at an exact step."""
    global _step_hook
    _step_hook = hook


def step_point() -> None:
    """A point where a killed run must leave a consistent state: after each tensor written,
    after the config/index, and between the steps of :func:`publish`."""
    if _step_hook is not None:
        _step_hook()


def publish(tmp: Path, out: Path, overwrite: bool, protect=(), command: str | None = None) -> None:
    """Put the finished ``tmp`` (from :func:`atomic_dir`) at ``out``. An existing ``out`` is
    replaced only with ``overwrite`` and only when its marker names the same kind of output as
    ``tmp``'s (``command``, default: the one :func:`atomic_dir` wrote into ``tmp``), by an
    atomic exchange where the OS has one (the old output lands in the owned wrapper); else the
    old output is moved into the wrapper, the new one renamed in (:func:`clean_stale_temps`
    undoes a half-done swap). The wrapper, with whatever it holds, is removed last."""
    tmp = Path(tmp)
    command = command if command is not None else marker_command(tmp)
    wrapper = _wrapper(tmp)
    if wrapper is None:
        raise AssertionError(f"publish: {tmp} is not a folder atomic_dir made in this process")
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
                remove_temp(wrapper)
                return
        except FileExistsError:
            pass  # appeared meanwhile: handled below
        else:
            os.rename(tmp, out)
            follow_umask(out)
            remove_temp(wrapper)
            return
    if not overwrite:
        raise UserError(f"out={out}: already exists (pass overwrite=true to replace it)")
    check_replaceable(out, protect, command)  # again: it may have appeared or changed since atomic_dir
    if _renameat2(tmp, out, _RENAME_EXCHANGE):  # out is the new output at once; the wrapper holds the old
        follow_umask(out)
        step_point()
        remove_temp(wrapper)
        return
    os.rename(out, wrapper / ASIDE)
    try:
        step_point()
        os.rename(tmp, out)
    except BaseException:  # interrupted between the renames: the old output goes back first
        if not os.path.lexists(out):
            os.rename(wrapper / ASIDE, out)
        raise
    follow_umask(out)
    step_point()
    remove_temp(wrapper)


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
