"""The suite's one way to run ``draftsmith``: :func:`run_cli` in this process through the entry
point ``python -m draftsmith`` calls (saves a torch import per call), :func:`cli_subprocess` as
a fresh ``python -m draftsmith``."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from typing import NamedTuple


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
    """``python -m draftsmith ARGS`` in a fresh interpreter (``env`` added to this one's)."""
    return subprocess.run([sys.executable, "-m", "draftsmith", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)
