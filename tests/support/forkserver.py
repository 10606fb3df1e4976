"""Driver scripts run as ``python SCRIPT ARGS`` runs them, in a process forked from a server that has
already imported torch: multiprocessing's forkserver with ``torch`` preloaded. Each driver is spared
the torch import (2-3 s of CPU on the CI machine); the TensorRT-LLM suite runs about a hundred.

What such a child shares with a fresh ``python SCRIPT``: its own process (pid, memory, exit code,
signals), ``sys.argv``, ``sys.path`` (the script's folder, then ``PYTHONPATH`` from the given
environment, then a plain interpreter's path), ``os.environ``, the temporary folder ``tempfile``
takes from it, the working directory, stdout and
stderr (captured to files), ``atexit`` handlers run at the end. What differs: torch (and what torch
imports) and this module are in ``sys.modules`` already; nothing of draftsmith, of an emitted
package or of TensorRT-LLM is (``tests/upstream/trtllm/test_trtllm_driver_processes.py``). A worker
TensorRT-LLM spawns imports torch first too. Use a fresh interpreter (``subprocess``) where the
start itself is what a test checks.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_CONTEXT = None
_BASE_PATH: list[str] = []


def _context():
    """The forkserver context, torch preloaded; the plain interpreter's ``sys.path`` found once."""
    global _CONTEXT
    if _CONTEXT is None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        shown = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
                               capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), check=True)
        _BASE_PATH[:] = json.loads(shown.stdout)
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["torch"])
        _CONTEXT = ctx
    return _CONTEXT


def _child(script: str, argv: list, env: dict, cwd, out_path: str, err_path: str, base_path: list,
           module: bool = False):
    """In the forked child: become ``python script *argv`` (``module``: ``python -m script *argv``)
    and run it as ``__main__``."""
    for fd, path in ((1, out_path), (2, err_path)):
        sys.stdout.flush(), sys.stderr.flush()
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # the server's cached answer; recomputed from this environment's TMPDIR
    if cwd is not None:
        os.chdir(cwd)
    extra = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = os.getcwd() if module else os.path.dirname(os.path.abspath(script))
    sys.path[:] = list(dict.fromkeys([first] + extra + base_path))  # first kept, as site.removeduppaths does
    sys.argv = [script, *argv]
    try:
        if module:
            runpy.run_module(script, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush(), sys.stderr.flush()


class Started:
    """A driver started by :func:`start_script`: ``communicate(timeout)`` -> ``(stdout, stderr)``,
    then ``returncode`` (negative: killed by that signal), as ``subprocess.Popen`` with text pipes."""

    def __init__(self, script: str, argv: list, env: dict, cwd=None, module: bool = False):
        ctx = _context()
        self.args = [sys.executable, *(["-m"] if module else []), script, *argv]
        self._dir = tempfile.mkdtemp(prefix="draftsmith-driver-")
        self._out, self._err = os.path.join(self._dir, "stdout"), os.path.join(self._dir, "stderr")
        self._proc = ctx.Process(target=_child, args=(script, argv, env, cwd, self._out, self._err, list(_BASE_PATH),
                                                      module))
        self._proc.start()
        self.returncode = None

    def communicate(self, timeout=None) -> tuple[str, str]:
        self._proc.join(timeout)
        timed_out = self._proc.exitcode is None
        if timed_out:
            self._proc.kill()
            self._proc.join()
        out, err = (Path(p).read_text(errors="replace") if os.path.exists(p) else "" for p in (self._out, self._err))
        shutil.rmtree(self._dir, ignore_errors=True)
        self.returncode = self._proc.exitcode
        if timed_out:
            raise subprocess.TimeoutExpired(self.args, timeout, out, err)
        return out, err


def start_script(script, *argv, env=None, cwd=None, module: bool = False) -> Started:
    """Start ``python script *argv`` (``module``: ``python -m script *argv``; ``env``: the whole
    environment, default this process's)."""
    return Started(str(script), [str(a) for a in argv], dict(os.environ if env is None else env), cwd, module)


def run_script(script, *argv, env=None, cwd=None, timeout=300, module: bool = False) -> subprocess.CompletedProcess:
    """``subprocess.run([python, script, *argv], capture_output=True, text=True, timeout=...)``, forked."""
    p = start_script(script, *argv, env=env, cwd=cwd, module=module)
    out, err = p.communicate(timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def run_module(module: str, *argv, env=None, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """``python -m module *argv`` as :func:`run_script` runs a script."""
    return run_script(module, *argv, env=env, cwd=cwd, timeout=timeout, module=True)
