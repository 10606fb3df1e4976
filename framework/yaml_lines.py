"""Safe YAML reading that remembers where each key path starts (for error messages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load_yaml(path: Path) -> tuple[Any, dict[tuple, int]]:
    """Parse ``path`` with the safe loader; return (data, {key path tuple: 1-based line}).

    Raises ``ValueError("<path>:<line>: <problem>")`` on malformed YAML.
    """
    text = path.read_text(encoding="utf-8")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ValueError(f"{where}: malformed YAML: {problem}") from None
    lines: dict[tuple, int] = {}

    def walk(n, prefix: tuple):
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                key = k.value
                try:
                    key = int(key) if k.tag.endswith(":int") else key
                except ValueError:
                    pass
                lines[prefix + (key,)] = k.start_mark.line + 1
                walk(v, prefix + (key,))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                lines[prefix + (i,)] = v.start_mark.line + 1
                walk(v, prefix + (i,))

    if node is not None:
        walk(node, ())
    return data, lines


def line_of(lines: dict[tuple, int], path: tuple) -> int | None:
    """The line of the longest prefix of ``path`` that the file has."""
    for n in range(len(path), 0, -1):
        if path[:n] in lines:
            return lines[path[:n]]
    return None
