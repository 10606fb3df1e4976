"""The transformers TensorRT-LLM pins (5.5.4, per the comment in NVIDIA/TensorRT-LLM
``_torch/pyexecutor/config_utils.py`` ``_build_minicpmv4_6_config`` @ 00679c66), in its own venv.

``$DRAFTSMITH_TRANSFORMERS_PINNED_PYTHON`` names its interpreter; otherwise the suite makes
``<repo>/.venv-transformers-5.5.4`` once (``pip install transformers==5.5.4``, about 15 s) and reuses
it. Skips in one line naming the variable when it cannot be made (no package index)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

from excerpts import REPO

VERSION = "5.5.4"
ENV = "DRAFTSMITH_TRANSFORMERS_PINNED_PYTHON"
VENV = REPO / f".venv-transformers-{VERSION}"


def _version(python: str) -> str:
    r = subprocess.run([python, "-c", "import transformers; print(transformers.__version__)"],
                       capture_output=True, text=True, timeout=120)
    return r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else ""


def python() -> str:
    import pytest

    given = os.environ.get(ENV)
    if given:
        got = _version(given)
        assert got == VERSION, f"{ENV}={given} has transformers {got or 'none'}, not {VERSION}"
        return given
    exe = VENV / "bin" / "python"
    if exe.is_file() and _version(str(exe)) == VERSION:
        return str(exe)
    try:
        venv.create(VENV, with_pip=True, clear=True)
        r = subprocess.run([str(exe), "-m", "pip", "install", "-q", f"transformers=={VERSION}"],
                           capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"transformers {VERSION} venv could not be made ({type(e).__name__}); set {ENV}")
    if r.returncode != 0 or _version(str(exe)) != VERSION:
        pytest.skip(f"transformers {VERSION} could not be installed ({(r.stderr or '').strip()[-160:]!r}); set {ENV}")
    return str(exe)


if __name__ == "__main__":  # print the interpreter (CI can make the venv ahead of pytest)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    print(python())
