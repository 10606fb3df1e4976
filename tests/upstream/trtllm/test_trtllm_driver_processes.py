"""The suite's driver processes (``support/forkserver.py``: forked from a server that imported torch)
start as ``python SCRIPT`` starts, in every respect a driver reads: argv, ``sys.path``, environment,
working directory, the temporary folder (``TMPDIR``), stdout / stderr, exit code, ``atexit``; and hold nothing of draftsmith, of an
emitted package, of TensorRT-LLM or of triton (whose interpreter mode is fixed at its import) when the
script begins; ``python -m`` alike."""

import json
import os
import subprocess
import sys

from support.forkserver import run_module, run_script, start_script

SCRIPT = r'''
import atexit, json, os, sys, tempfile
seen = sorted(m for m in sys.modules if m.split(".")[0].startswith(("draftsmith", "tensorrt_llm", "triton")))
atexit.register(lambda: print("atexit ran", file=sys.stderr))
print(json.dumps({"argv": sys.argv[1:], "path": sys.path, "cwd": os.getcwd(), "env": os.environ.get("DRIVER_PROBE"),
                  "seen": seen, "main": __name__, "pid": os.getpid(), "tmp": tempfile.gettempdir()}))
sys.exit(int(sys.argv[1]))
'''


def test_a_forked_driver_starts_as_a_fresh_interpreter(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    extra = tmp_path / "extra"
    extra.mkdir()
    (tmp_path / "TMPDIR").mkdir()
    env = {**os.environ, "DRIVER_PROBE": "yes", "TMPDIR": str(tmp_path / "TMPDIR"), "PYTHONPATH": os.pathsep.join(
        [str(extra)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    fresh = subprocess.run([sys.executable, str(script), "3", "x y"], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=60)
    forked = run_script(script, 3, "x y", env=env, cwd=tmp_path, timeout=60)
    assert (forked.returncode, fresh.returncode) == (3, 3), forked.stderr
    got, want = json.loads(forked.stdout), json.loads(fresh.stdout)
    assert got["pid"] != os.getpid()
    for key in ("argv", "path", "cwd", "env", "seen", "main", "tmp"):
        assert got[key] == want[key], f"{key}: forked {got[key]!r}, python SCRIPT {want[key]!r}"
    assert got["tmp"] == str(tmp_path / "TMPDIR")
    assert got["seen"] == [], got["seen"]
    assert forked.stderr.strip() == fresh.stderr.strip() == "atexit ran"


def test_a_forked_driver_reports_an_exception_and_runs_concurrently(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("import sys, time\ntime.sleep(float(sys.argv[1]))\nraise ValueError('boom ' + sys.argv[1])\n")
    procs = [start_script(script, s) for s in ("0.5", "0.5")]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [1, 1]
    assert all("ValueError: boom 0.5" in err and "Traceback" in err for _, err in outs), outs


def test_a_forked_module_run_starts_as_python_dash_m(tmp_path):
    (tmp_path / "probe_mod.py").write_text(SCRIPT)
    env = {**os.environ, "DRIVER_PROBE": "m"}
    fresh = subprocess.run([sys.executable, "-m", "probe_mod", "0"], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=60)
    forked = run_module("probe_mod", 0, env=env, cwd=tmp_path, timeout=60)
    got, want = json.loads(forked.stdout), json.loads(fresh.stdout)
    assert forked.returncode == fresh.returncode == 0, forked.stderr
    for key in ("argv", "path", "cwd", "env", "seen", "main"):
        assert got[key] == want[key], f"{key}: forked {got[key]!r}, python -m {want[key]!r}"
