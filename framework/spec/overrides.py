"""Dotted overrides on a spec's data (the library's, not Hydra's).

- ``key.path=value``: replace an existing value (list items by index: ``layers.0``);
- ``+key.path=value``: add a key that is not there yet;
- ``~key.path``: remove a key.
Keys may carry the command line's ``adapter.`` prefix. Values are read as YAML (safe
loader): ``2048``, ``true``, ``null``, ``"text"``, ``[a, b]``.

No interpolation: a value holding ``${`` is refused on the final tree (spec/loading.py).
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any, Iterable

import yaml

from ..errors import UserError


def _steps(key: str) -> list:
    key = key.removeprefix("adapter.")
    return [int(p) if p.isdigit() else p for p in key.split(".") if p != ""]


def _step(cur: Any, p):
    """``p`` as a key of ``cur``: list index (int) or mapping key (as spelled, else its text)."""
    if isinstance(cur, dict) and p not in cur and str(p) in cur:
        return str(p)
    return p if isinstance(cur, list) or p in cur else str(p)


def _parent(data: Any, steps: list, where: str, create: bool = False):
    cur = data
    for i, p in enumerate(steps[:-1]):
        if isinstance(cur, list) and isinstance(p, int) and p < len(cur):
            cur = cur[p]
        elif isinstance(cur, dict) and _step(cur, p) in cur and cur[_step(cur, p)] is not None:
            cur = cur[_step(cur, p)]
        elif isinstance(cur, dict) and create:  # +a.b.c=v makes the missing mappings
            cur[str(p)] = {}
            cur = cur[str(p)]
        else:
            raise UserError(f"{where}: {'.'.join(map(str, steps[:i + 1]))}: no such key")
    return cur


def apply_overrides(data: dict, overrides: Iterable[str], path: Path | None = None) -> dict:
    """A copy of ``data`` with ``overrides`` applied in order (see the module docstring)."""
    out = copy.deepcopy(data)
    for o in overrides:
        sigil = o[: len(o) - len(o.lstrip("+~"))]
        key, eq, text = o[len(sigil):].partition("=")
        where = f"{path}: override {o}" if path else f"override {o}"
        steps = _steps(key)
        if not steps or (sigil != "~" and not eq):
            raise UserError(f"{where}: expected key=value, +key=value or ~key")
        parent = _parent(out, steps, where, create=sigil == "+")
        last = _step(parent, steps[-1]) if isinstance(parent, dict) else steps[-1]
        present = (isinstance(parent, dict) and last in parent) or (
            isinstance(parent, list) and isinstance(last, int) and last < len(parent))
        if sigil == "~":
            if present:
                del parent[last]
            continue
        try:
            value = yaml.safe_load(text) if text != "" else ""
        except yaml.YAMLError as e:
            raise UserError(f"{where}: value is not YAML ({str(e).splitlines()[0]})") from None
        if sigil == "" and not present:
            known = sorted(map(str, parent)) if isinstance(parent, dict) else []
            close = difflib.get_close_matches(str(last), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UserError(f"{where}: unknown key {key.removeprefix('adapter.')}{hint}; use +key=value to add one")
        if sigil == "+" and present:
            raise UserError(f"{where}: {key} is already set; use {key}=value to replace it")
        if not isinstance(parent, (dict, list)):
            raise UserError(f"{where}: {'.'.join(map(str, steps[:-1]))} is not a mapping")
        parent[last] = value
    return out
