"""SIGTERM / SIGHUP / Ctrl-C end a draftsmith process even when the signal lands inside a
finalizer (``__del__``), where Python prints "Exception ignored" and would run on."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    # as an interactive shell starts a command (a background job or nohup inherits SIG_IGN, which
    # draftsmith keeps: it never overrides an ignored signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from draftsmith.framework.io.publish import install_signal_handlers
    install_signal_handlers()

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.{sig})
            for _ in range(1000):  # bytecodes inside the finalizer: the handler runs here
                pass

    try:
        Finalized()
        t = time.monotonic()
        while time.monotonic() - t < 30:
            time.sleep(0.01)
        print("ran on")
    except KeyboardInterrupt as e:
        print("interrupted", getattr(e, "exit_code", 130))
""")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_signal_inside_a_finalizer_still_ends_the_run(sig):
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", SCRIPT.format(sig=sig)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-800:]
    assert p.stdout.split() == ["interrupted", str(128 + getattr(signal, sig))], (p.stdout, p.stderr[-800:])
    assert time.monotonic() - t < 20


def test_other_unraisable_exceptions_still_reach_the_previous_hook():
    script = textwrap.dedent("""
        import sys
        seen = []
        sys.unraisablehook = lambda u: seen.append(type(u.exc_value).__name__)
        from draftsmith.framework.io.publish import install_signal_handlers
        install_signal_handlers(); install_signal_handlers()  # wrapped once
        class F:
            def __del__(self):
                raise ValueError("x")
        F()
        print(seen)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "['ValueError']", (p.stdout, p.stderr[-800:])
