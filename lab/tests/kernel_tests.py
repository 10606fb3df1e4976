"""The product kernel tests' module (``tests/lowering/test_triton_window_block.py``), imported
by path so that a lab test run on its own finds its helpers (cases, poisoning, the oracle check)."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = "lab_kernel_tests"


def kernel_tests():
    """The module, imported once (``tests/`` on ``sys.path`` for its own imports)."""
    if NAME not in sys.modules:
        for folder in (ROOT / "tests", ROOT):
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
        spec = importlib.util.spec_from_file_location(NAME, ROOT / "tests" / "lowering" / "test_triton_window_block.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[NAME] = module
        spec.loader.exec_module(module)
    return sys.modules[NAME]
