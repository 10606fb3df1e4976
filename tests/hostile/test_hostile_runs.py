"""Concurrent runs and signals: a run never removes another live run's temp dir (outputs
whose names share a prefix, or hold glob characters); SIGTERM and SIGHUP mid-write clean up
like Ctrl-C: nothing at the destination, no temp dir beside it, exit 128+signal."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.synth import synthesize
from draftsmith.framework.io.ownership import owner_path, read_owner
from draftsmith.framework.io.publish import atomic_dir, clean_stale_temps, remove_temp
from support.owned_folders import plant_owned
from support.reliability_log import record

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("src") / "ckpt"
    synthesize(load_adapter("minimax_dspark"), "tiny", d, seed=21)
    return d


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("name", ["r*", "r?n1", "[r]un1", "ru", "run"])
def test_prefix_or_glob_output_spares_live_temp(name, source, tmp_path):
    """A live temp of ``run1`` (owned by this process) survives a convert to ``name``; a temp
    of ``name`` whose owner is dead is tidied; ``run1``'s dead temp is not ``name``'s to tidy."""
    d = tmp_path / "dir"
    d.mkdir()
    live = atomic_dir(d / "run1", False, "convert")
    dead_other = plant_owned(d, ".run1.tmp-")
    dead_mine = plant_owned(d, f".{name}.tmp-")
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(["convert", "adapter=minimax_dspark", f"source={source}", f"out={d / name}"])
    assert rc == 0, e.getvalue()
    assert live.is_dir() and read_owner(live.parent) is not None, "a live run's temp dir was removed"
    assert dead_other.is_dir(), "another output's temp was tidied by a run to a different name"
    assert not dead_mine.exists(), "this output's stale temp was left"
    assert not os.path.lexists(owner_path(d / name)), "an owner record was left beside the output"
    assert not any(n.startswith(".draftsmith-owner") for n in os.listdir(d / name)), "an owner record was published"
    remove_temp(live)
    record("runs", f"concurrent outputs sharing a prefix / glob characters ({name})",
           "the live temp survives; only this output's stale temp is tidied")


def test_pid_reuse_is_not_ownership(tmp_path):
    """A temp whose recorded owner pid is alive but started at another time is stale."""
    out = tmp_path / "o"
    t = plant_owned(tmp_path, ".o.tmp-", pid=os.getpid(), start=-1)
    clean_stale_temps(out)
    assert not t.exists()
    record("runs", "temp whose owner pid was reused", "tidied")


SELF_SIGNAL = textwrap.dedent("""
    import os, signal, sys, time
    import draftsmith.framework.cli.main as m
    from draftsmith.framework.io.publish import set_step_hook
    sig, at = getattr(signal, sys.argv[1]), int(sys.argv[2])
    # As from a terminal: dispositions are inherited, and under nohup SIGHUP arrives ignored
    # (which the CLI respects; see test_sighup_ignored_under_nohup_is_respected).
    signal.signal(sig, signal.SIG_IGN if sys.argv[3] == "ignored" else signal.SIG_DFL)
    count = [0]
    def hook():
        count[0] += 1
        if count[0] == at:
            os.kill(os.getpid(), sig)
            time.sleep(0.5)  # the handler runs in the main thread meanwhile
    set_step_hook(hook)
    sys.exit(m.main(sys.argv[4:]))
""")


def _convert_signalling_itself(sig: str, at: int, disposition: str, source, out):
    """A convert to ``out`` that sends itself ``sig`` at publish step ``at``, the signal's
    disposition at start ``default`` or ``ignored`` (as under nohup)."""
    return subprocess.run([sys.executable, "-c", SELF_SIGNAL, sig, str(at), disposition, "convert",
                           "adapter=minimax_dspark", f"source={source}", f"out={out}"], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT.parent)))


@pytest.mark.parametrize("sig,at", [("SIGTERM", 1), ("SIGHUP", 3)])
def test_signal_mid_write_cleans_up(sig, at, source, tmp_path):
    out = tmp_path / "out"
    p = _convert_signalling_itself(sig, at, "default", source, out)
    left = sorted(x.name for x in tmp_path.iterdir())
    if at == 10_000:  # never reached: the control, a normal run
        assert p.returncode == 0, p.stderr
        assert left == ["out"]
        return
    assert p.returncode == 128 + getattr(signal, sig), (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert left == [], f"left behind: {left}"
    record("runs", f"{sig} mid-write (step {at})", f"exit {128 + getattr(signal, sig)}, nothing left")


def test_sighup_ignored_under_nohup_is_respected(source, tmp_path):
    """Started under ``nohup`` (SIGHUP inherited as ignored), a hang-up mid-write does not stop
    the run: it completes and publishes, as nohup asks."""
    out = tmp_path / "out"
    p = _convert_signalling_itself("SIGHUP", 3, "ignored", source, out)
    assert p.returncode == 0, p.stderr[-2000:]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out"] and (out / "config.json").is_file()
    record("runs", "SIGHUP mid-write under nohup", "ignored, as nohup asks: the run completes")


def test_external_sigterm_while_writing(source, tmp_path):
    """SIGTERM from outside once the temp dir exists (each step slowed): nothing is left."""
    out = tmp_path / "out"
    code = textwrap.dedent("""
        import sys, time
        import draftsmith.framework.cli.main as m
        from draftsmith.framework.io.publish import set_step_hook
        set_step_hook(lambda: time.sleep(0.3))
        sys.exit(m.main(sys.argv[1:]))
    """)
    p = subprocess.Popen([sys.executable, "-c", code, "convert", "adapter=minimax_dspark", f"source={source}",
                          f"out={out}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT.parent)))
    deadline = time.time() + 30
    while time.time() < deadline and not any(x.name.startswith(".out.tmp-") for x in tmp_path.iterdir()):
        time.sleep(0.02)
    time.sleep(0.4)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err[-2000:])
    assert sorted(x.name for x in tmp_path.iterdir()) == [], list(tmp_path.iterdir())
    record("runs", "external SIGTERM while writing", "exit 143, nothing left")
