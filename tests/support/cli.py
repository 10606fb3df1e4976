"""The suite's one way to run ``draftsmith``: :func:`run_cli` in this process through the entry
point ``python -m draftsmith`` calls (saves a torch import per call), :func:`cli_subprocess` as
``python -m draftsmith`` in a process of its own (its memory, exit code and signals), forked with
torch preloaded (:mod:`.forkserver`). A test of how the command starts runs a fresh interpreter
itself (``tests/cli/test_startup.py``, the signal tests)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import time
from typing import NamedTuple

from .forkserver import run_module


class CliRun(NamedTuple):
    """Exit code, stdout, stderr and wall seconds of one in-process run."""

    code: int
    out: str
    err: str
    seconds: float


def run_cli(args) -> CliRun:
    """``draftsmith ARGS`` in this process; an exception escaping ``main`` is the test's failure
    (a user would see a traceback); ``SystemExit`` becomes its exit code."""
    from draftsmith.framework.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return CliRun(code, out.getvalue(), err.getvalue(), time.perf_counter() - t)


def cli_subprocess(args, timeout: float = 60, env=None, cwd=None) -> subprocess.CompletedProcess:
    """``python -m draftsmith ARGS`` in its own process (``env`` added to this one's), as
    ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)`` returns it."""
    return run_module("draftsmith", *map(str, args), env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout)
