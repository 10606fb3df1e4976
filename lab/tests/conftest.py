"""The lab's tests (run on demand: ``python -m pytest lab/tests``; the product suite does not
collect them). Lab scripts import the benches' shared modules (``bench/``) and each other."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT / "lab", ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
