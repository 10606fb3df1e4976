"""What ``draftsmith init`` knows of a checkpoint before deciding anything, and what it says.

:class:`Checkpoint` holds ``config.json``, the safetensors headers (no tensor data), the
config sections and their merged view, the common name prefix and the per-layer names
under any layer naming (``layers.{i}``, ``blocks.{i}``, ``h.{i}``, ``model.layers.{i}``).
:class:`Remarks` collects the YAML comments and the TODOs each piece of the spec writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compile.resolve import merge_sections
from ..convert.checkpoint import read_config, read_headers
from ..errors import UserError
from ..shown import is_shown_as_is, shown
from .layout import TargetLayout

SECTION_CANDIDATES = ("text_config", "transformer_layer_config", "llm_config", "language_config", "model_config")


@dataclass(frozen=True)
class LayerName:
    """A per-layer tensor name (after the common prefix): ``<container>.<i>.<rest>``."""

    container: str
    i: str
    rest: str


@dataclass
class Remarks:
    """End-of-line ``comments`` and whole comment lines (``notes``) by key path (see
    ``spec/commented_yaml``), and the TODOs ``init`` prints, in the order they were made."""

    comments: dict[tuple, str] = field(default_factory=dict)
    notes: dict[tuple, list[str]] = field(default_factory=dict)
    todos: list[str] = field(default_factory=list)

    def todo(self, text: str) -> str:
        self.todos.append(text)
        return f"TODO: {text}"

    def note(self, path: tuple, text: str) -> None:
        self.notes.setdefault(path, []).append(text)


@dataclass
class Checkpoint:
    """A checkpoint as ``init`` reads it (config and headers only)."""

    source: Path
    raw: dict[str, Any]
    headers: dict[str, Any]
    sections: list[str]
    merged: dict[str, Any]
    prefix: str
    rel: dict[str, str]
    layers: dict[str, LayerName]


def common_prefix(names: list[str]) -> str:
    """The leading components every name shares (never a whole name)."""
    parts = [n.split(".") for n in names]
    out = []
    for comps in zip(*parts):
        if len(set(comps)) != 1:
            break
        out.append(comps[0])
    if out and any(len(p) == len(out) for p in parts):
        out = out[:-1]
    return "".join(c + "." for c in out)


def layer_names(rel: dict[str, str], layout: TargetLayout) -> dict[str, LayerName]:
    """Per-layer names: ``<container>.<digits>.<rest>``, the family's own container name
    first (its first occurrence), else the first index component of a container holding
    a layer module (``self_attn``, ``mlp``, ...) somewhere in some name."""
    own = re.compile(r"^(?P<c>(?:\w+\.)*?" + re.escape(layout.container) + r")\.(?P<i>\d+)\.(?P<rest>.+)$")
    any_ = re.compile(r"^(?P<c>(?:\w+\.)*?\w+)\.(?P<i>\d+)\.(?P<rest>.+)$")
    found = {n: own.match(r) or any_.match(r) for n, r in rel.items()}
    found = {n: LayerName(m.group("c"), m.group("i"), m.group("rest")) for n, m in found.items() if m}
    holding = {v.container for v in found.values() if layout.modules & set(v.rest.split("."))}
    return {n: v for n, v in found.items()
            if v.container in holding or v.container.rsplit(".", 1)[-1] == layout.container}


def read_checkpoint(source: Path, layout: TargetLayout) -> Checkpoint:
    """Config, headers and names of ``source``; refuses names a spec cannot show as they are."""
    raw = read_config(source)
    headers = {n: st.meta for n, st in read_headers(source).items()}
    bad = [n for n in headers if not is_shown_as_is(n)]
    if bad:
        raise UserError(*(f"{source}: tensor {shown(n)}: its name holds a control character, format character or "
                          "lone surrogate; init writes only printable names into a spec" for n in bad[:20]))
    sections = [s for s in SECTION_CANDIDATES if isinstance(raw.get(s), dict)]
    names = sorted(headers)
    prefix = common_prefix(names)
    rel = {n: n[len(prefix):] for n in names}
    return Checkpoint(source, raw, headers, sections, merge_sections(raw, sections), prefix, rel,
                      layer_names(rel, layout))
