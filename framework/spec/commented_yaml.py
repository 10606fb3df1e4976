"""An :class:`AdapterSpec` written as YAML with comments (what ``draftsmith init`` writes).

The data comes from ``spec.model_dump(by_alias=True, exclude_unset=True)``: only the
fields the caller set are written, in the schema's field order. Comments are a map
from a key path (``("config", "fields", "dflash_config.block_size")``, list items by
index) to text: ``comments`` go at the end of the line where that node starts, ``notes``
are whole comment lines written after the node. Layout: mappings down to depth 2 and
lists of mappings are block style; deeper collections without nested mappings are one
flow line when it fits in :data:`FLOW_WIDTH` characters. Strings are JSON-quoted
(valid YAML); other scalars are PyYAML's own spelling (``1.0e-06``, not JSON's
``1e-06``, which PyYAML would read as a string). :func:`dump` checks that the text
reads back to the same data.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from pydantic import BaseModel

Path = tuple
#: widest flow collection written on one line (characters, without indent and key)
FLOW_WIDTH = 100
_PLAIN_KEY = re.compile(r"^[A-Za-z_][\w.\-]*$")


def _scalar(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if v is None or isinstance(v, (bool, int)):
        return json.dumps(v)
    return yaml.safe_dump([v], default_flow_style=True).strip()[1:-1]


def _key(k: Any) -> str:
    if isinstance(k, str) and _PLAIN_KEY.match(k) and yaml.safe_load(f"{k}: 0") == {k: 0}:
        return k
    return _scalar(k)


def _flow(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)}: {_flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_flow(x) for x in v) + "]"
    return _scalar(v)


def _as_flow(v: Any, depth: int) -> str | None:
    """The one-line form of ``v`` at nesting ``depth``, or None for block style."""
    if not isinstance(v, (dict, list, tuple)) or not v:
        return _flow(v)
    items = v.values() if isinstance(v, dict) else v
    if isinstance(v, dict) and depth <= 2:
        return None
    if any(isinstance(x, dict) for x in items):
        return None
    text = _flow(v)
    return text if len(text) <= FLOW_WIDTH else None


class _Writer:
    def __init__(self, comments: dict[Path, str], notes: dict[Path, list[str]]):
        self.comments, self.notes, self.lines = comments, notes, []

    def line(self, text: str, path: Path) -> None:
        c = self.comments.get(path)
        self.lines.append(f"{text}  # {c}" if c else text)

    def after(self, path: Path, indent: str) -> None:
        self.lines.extend(f"{indent}# {n}" for n in self.notes.get(path, ()))

    def mapping(self, d: dict, path: Path, indent: str, first: str | None = None) -> None:
        """Block mapping; ``first`` replaces the indent of the first line (a list item's ``- ``)."""
        prev_block = False
        for n, (k, v) in enumerate(d.items()):
            lead = first if (n == 0 and first is not None) else indent
            p = path + (k,)
            flow = _as_flow(v, len(p))
            if not path and n and (flow is None or prev_block):
                self.lines.append("")  # a blank line around top-level sections
            prev_block = flow is None
            if flow is not None:
                self.line(f"{lead}{_key(k)}: {flow}", p)
            else:
                self.line(f"{lead}{_key(k)}:", p)
                self.value(v, p, indent + "  ")
            self.after(p, indent + ("  " if flow is None else ""))

    def value(self, v: Any, path: Path, indent: str) -> None:
        if isinstance(v, dict):
            self.mapping(v, path, indent)
            return
        for i, x in enumerate(v):
            p = path + (i,)
            flow = _as_flow(x, len(p))
            if flow is not None:
                self.line(f"{indent}- {flow}", p)
            elif isinstance(x, dict):
                self.mapping(x, p, indent + "  ", first=indent + "- ")
            else:
                self.line(f"{indent}-", p)
                self.value(x, p, indent + "  ")
            self.after(p, indent + "  ")


def dump(spec: BaseModel, header: list[str] = (), comments: dict[Path, str] | None = None,
         notes: dict[Path, list[str]] | None = None) -> str:
    """YAML text of the fields set on ``spec``, with ``header`` comment lines first."""
    data = spec.model_dump(by_alias=True, exclude_unset=True)
    comments = dict(comments or {})
    _hoist_item_comments(data, (), comments)
    w = _Writer(comments, notes or {})
    w.lines.extend(f"# {h}" if h else "#" for h in header)
    w.mapping(data, (), "")
    text = "\n".join(w.lines).rstrip() + "\n"
    if yaml.safe_load(text) != data:
        raise AssertionError("commented_yaml.dump: the text does not read back to the spec's data")
    return text


def _hoist_item_comments(v: Any, path: Path, comments: dict[Path, str]) -> None:
    """A block-style list item's comment goes on the line of its first key."""
    if isinstance(v, dict):
        for k, x in v.items():
            _hoist_item_comments(x, path + (k,), comments)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            p = path + (i,)
            if isinstance(x, dict) and x and _as_flow(x, len(p)) is None and p in comments:
                first = p + (next(iter(x)),)
                comments[first] = "  # ".join(c for c in (comments.pop(p), comments.get(first)) if c)
            _hoist_item_comments(x, p, comments)
