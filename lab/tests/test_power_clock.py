"""lab/power_clock.py's refusals, before any GPU or NVML work (CPU: the timing needs a CUDA GPU and
nvidia-ml-py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args,names", [(["--kind", "dflash2_minimax", "--seconds", "0"], "--seconds 0.0"),
                                        (["--kind", "no_such_kind"], "--kind no_such_kind")])
def test_bad_arguments_are_refused_in_one_line(args, names):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(ROOT / d) for d in ("", "lab", "bench", "tests")))
    run = subprocess.run([sys.executable, str(ROOT / "lab" / "power_clock.py"), *args],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(names), run.stderr
