"""Stand-in of ``trtllm-serve serve --custom_module_dirs DIR`` / ``trtllm-bench --custom_module_dirs``.

NOT verified in the stored source beyond the issue's report and the option's help text quoted
in docs/trtllm-interface.md: each DIR is a Python *package* directory, imported by name (its
parent on ``sys.path``) in the serving process only; the architectures it registered are handed
to worker processes as module names (``register_external_model_modules``), its draft builders
are not. Not a TensorRT-LLM module path.
"""

import importlib
import sys
from pathlib import Path


def import_custom_module_dirs(dirs):
    mods = []
    for d in dirs:
        d = Path(d).resolve()
        if not (d / "__init__.py").is_file():
            raise ValueError(f"--custom_module_dirs {d}: not a Python package directory")
        if str(d.parent) not in sys.path:
            sys.path.insert(0, str(d.parent))
        mods.append(importlib.import_module(d.name))
    return mods
