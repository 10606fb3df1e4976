"""Case counting for ``docs/reliability.md`` (see ``bench/reliability_report.py``).

Each hostile-input test calls :func:`record` once per case *after* its assertions held.
When ``DRAFTSMITH_RELIABILITY_LOG`` names a file, one JSON line per case is appended
there; otherwise recording is a no-op. A failing case raises before it is recorded, so
the report counts only cases that ended the way the test demands.
"""

from __future__ import annotations

import json
import os


def record(area: str, kind: str, result: str) -> None:
    """Count one case of bad input ``kind`` (in ``area``) that ended in ``result``; the line
    also names the test that held it (``file::test``)."""
    path = os.environ.get("DRAFTSMITH_RELIABILITY_LOG")
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0].split("[")[0]  # file::test, no params
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"area": area, "kind": kind, "result": result, "test": test}) + "\n")
