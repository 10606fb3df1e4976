"""Make ``draftsmith.*`` importable from this checkout when the package is not installed.

``pyproject.toml`` maps ``draftsmith.framework|transforms|lowering|adapters`` onto top-level
folders; an editable install does that mapping. On a machine without the install (the lent
GPU machine), ``import checkout`` at the top of a benchmark maps them here instead.
"""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _map() -> None:
    try:
        import draftsmith.lowering  # noqa: F401
        return
    except ImportError:
        pass
    sys.path.insert(0, str(ROOT))
    import draftsmith  # noqa: F401  (ROOT/draftsmith)

    for sub in ("lowering", "framework"):  # what the benchmarks import
        spec = importlib.util.spec_from_file_location(
            f"draftsmith.{sub}", ROOT / sub / "__init__.py", submodule_search_locations=[str(ROOT / sub)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[f"draftsmith.{sub}"] = mod
        setattr(sys.modules["draftsmith"], sub, mod)
        spec.loader.exec_module(mod)


_map()
