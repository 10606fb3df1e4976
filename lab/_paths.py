"""Puts ``bench/`` (the shared timing module and ``attention.py``) on ``sys.path`` for the lab's
scripts, which run as ``python3 lab/<script>.py`` from a checkout."""

import sys
from pathlib import Path

BENCH = str(Path(__file__).resolve().parents[1] / "bench")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)
