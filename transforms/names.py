"""Name templates: invertible name patterns with named placeholders.

``"layers.{i}.self_attn.{proj}.weight"``: ``{x}`` matches one dot-free component,
``{x*}`` matches one or more components (``a.b.c``). A template can match a name
(giving its placeholder values) and format values back into a name, so rules written
with templates run in both directions.
"""

from __future__ import annotations

import re

from .regex import compile_built
from functools import cached_property

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(\*?)\}")


class NameTemplate:
    def __init__(self, text: str):
        self.text = text
        names = [m.group(1) for m in _PLACEHOLDER.finditer(text)]
        if len(names) != len(set(names)):
            raise ValueError(f"template {text!r} repeats a placeholder")
        self.placeholders = tuple(names)

    @cached_property
    def regex(self):
        out, pos = [], 0
        for m in _PLACEHOLDER.finditer(self.text):
            out.append(re.escape(self.text[pos : m.start()]))
            out.append(f"(?P<{m.group(1)}>{'.+' if m.group(2) else '[^.]+'})")
            pos = m.end()
        out.append(re.escape(self.text[pos:]))
        return compile_built("^" + "".join(out) + "$")  # RE2: many {x*} cannot backtrack

    @cached_property
    def literal_prefix(self) -> str:
        """The text before the first placeholder: every match starts with it."""
        m = _PLACEHOLDER.search(self.text)
        return self.text[: m.start()] if m else self.text

    def match(self, name: str) -> dict[str, str] | None:
        if not name.startswith(self.literal_prefix):  # cheap exact rejection (most names, most rules)
            return None
        m = self.regex.match(name)
        return m.groupdict() if m else None

    @cached_property
    def _pieces(self) -> tuple[tuple[str, str], ...]:
        """(literal text, placeholder after it or "") pairs that spell the template."""
        out, pos = [], 0
        for m in _PLACEHOLDER.finditer(self.text):
            out.append((self.text[pos : m.start()], m.group(1)))
            pos = m.end()
        out.append((self.text[pos:], ""))
        return tuple(out)

    def format(self, values: dict[str, str]) -> str:
        missing = [p for p in self.placeholders if p not in values]
        if missing:
            raise ValueError(f"template {self.text!r} needs {missing}")
        return "".join(lit + (values[p] if p else "") for lit, p in self._pieces)

    def __repr__(self) -> str:
        return f"NameTemplate({self.text!r})"
