"""Safe YAML reading that remembers where each key path starts (for error messages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import UserError
from ..io.safe_read import read_limited

#: Largest spec file read, and most YAML nodes it may expand to through aliases
#: (an alias bomb or a recursive alias is refused before anything walks the data).
MAX_YAML_BYTES = 1 << 20
MAX_YAML_NODES = 100_000
#: Most bytes (UTF-8) of scalars the document expands to, each scalar counted once per path
#: that reaches it through aliases: a 300 KB string referenced 3,000 times is 900 MB of output
#: for whatever copies it (docs, JSON dumps), though it is 3,001 nodes
MAX_YAML_EXPANDED_BYTES = 4 << 20
#: Most aliases (``*name``) in one document, and longest mapping key (characters)
MAX_YAML_ALIASES = 1000
MAX_YAML_KEY_CHARS = 1024


#: The safe loader, on libyaml's C parser where PyYAML has it (same constructor and resolver).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader) if yaml.__with_libyaml__ else yaml.SafeLoader


def _check_event_count(path: Path, text: str) -> None:
    """Refuse a file whose parse events (nodes as written, aliases not expanded) exceed
    :data:`MAX_YAML_NODES`, streaming (no tree built)."""
    aliases = 0
    for n, event in enumerate(yaml.parse(text, Loader=SAFE_LOADER)):
        line = event.start_mark.line + 1 if event.start_mark else "?"
        if n > 2 * MAX_YAML_NODES:
            raise ValueError(f"{path}:{line}: malformed YAML: more than {MAX_YAML_NODES} nodes")
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise ValueError(f"{path}:{line}: malformed YAML: more than {MAX_YAML_ALIASES} aliases")


def _check_expansion(path: Path, root) -> None:
    """Refuse a document whose expansion (aliases followed) exceeds :data:`MAX_YAML_NODES`
    nodes or :data:`MAX_YAML_EXPANDED_BYTES` bytes of scalars, or holds a recursive alias or a
    mapping key longer than :data:`MAX_YAML_KEY_CHARS`; sizes are memoized per node (linear)."""
    sizes: dict[int, tuple[int, int]] = {}
    on_stack: set[int] = set()

    def size(n) -> tuple[int, int]:
        if id(n) in sizes:
            return sizes[id(n)]
        if id(n) in on_stack:
            raise ValueError(f"{path}:{n.start_mark.line + 1}: malformed YAML: recursive alias")
        on_stack.add(id(n))
        nodes, nbytes = 1, 0
        if isinstance(n, yaml.ScalarNode):
            nbytes = len(n.value.encode("utf-8", "surrogatepass"))
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode) and len(k.value) > MAX_YAML_KEY_CHARS:
                    raise ValueError(f"{path}:{k.start_mark.line + 1}: malformed YAML: a key of {len(k.value)} "
                                     f"characters (at most {MAX_YAML_KEY_CHARS})")
                for c in (k, v):
                    a, b = size(c)
                    nodes, nbytes = nodes + a, nbytes + b
        elif isinstance(n, yaml.SequenceNode):
            for v in n.value:
                a, b = size(v)
                nodes, nbytes = nodes + a, nbytes + b
        on_stack.discard(id(n))
        if nodes > MAX_YAML_NODES:
            raise ValueError(f"{path}:{n.start_mark.line + 1}: malformed YAML: aliases expand to more than {MAX_YAML_NODES} nodes")
        if nbytes > MAX_YAML_EXPANDED_BYTES:
            raise ValueError(f"{path}:{n.start_mark.line + 1}: malformed YAML: aliases expand to more than "
                             f"{MAX_YAML_EXPANDED_BYTES} bytes of text")
        sizes[id(n)] = (nodes, nbytes)
        return nodes, nbytes

    try:
        size(root)
    except RecursionError:
        raise ValueError(f"{path}: malformed YAML: nested too deeply") from None


def load_yaml(path: Path) -> tuple[Any, dict[tuple, int]]:
    """Parse ``path`` with the safe loader; return (data, {key path tuple: 1-based line}).

    Raises ``ValueError("<path>:<line>: <problem>")`` on malformed YAML, an unreadable or
    non-UTF-8 or oversized file, and recursive or exploding aliases.
    """
    try:  # a regular file only (a FIFO or /dev/zero behind a link is refused), bytes counted while read
        text = read_limited(path, MAX_YAML_BYTES, "an adapter spec").decode("utf-8")
    except UserError as e:
        raise ValueError(e.problems[0]) from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        _check_event_count(path, text)  # before composing: a 400 000-item list is refused in < 1 s
        node = yaml.compose(text, Loader=SAFE_LOADER)
        if node is not None:
            _check_expansion(path, node)
        data = yaml.load(text, Loader=SAFE_LOADER)
    except RecursionError:
        raise ValueError(f"{path}: malformed YAML: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ValueError(f"{where}: malformed YAML: {problem}") from None
    lines: dict[tuple, int] = {}

    def walk(n, prefix: tuple):
        if isinstance(n, yaml.MappingNode):
            seen = set()
            for k, v in n.value:
                key = k.value
                try:
                    key = int(key) if k.tag.endswith(":int") else key
                except ValueError:
                    pass
                if isinstance(key, (str, int)) and key != "<<":
                    if key in seen:
                        where = ".".join(map(str, prefix + (key,)))
                        raise ValueError(f"{path}:{k.start_mark.line + 1}: {where}: duplicate key")
                    seen.add(key)
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
