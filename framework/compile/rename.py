"""Rename rules (vLLM-style kinds): ``prefix``, ``template``, ``regex``; ``to: null`` drops.

Rules are tried in order and the first that matches a name applies; a name no rule
matches keeps its name. ``inverse`` maps a target name back to a source name (used by
``synth``); ``regex`` rules invert only through their explicit ``inverse_match``/``inverse_to``.
"""

from __future__ import annotations


from dataclasses import dataclass

from ...transforms.names import NameTemplate
from ...transforms.regex import compile_regex

from ..spec.schema import RenameRule

@dataclass
class CompiledRename:
    rule: RenameRule
    index: int

    def __post_init__(self):
        r = self.rule
        if r.kind == "regex":
            self.rx = compile_regex(r.match)
            self.inv_rx = compile_regex(r.inverse_match) if r.inverse_match else None
        elif r.kind == "template":
            self.src = NameTemplate(r.match)
            self.dst = NameTemplate(r.to) if r.to is not None else None
            if self.dst is not None and set(self.dst.placeholders) - set(self.src.placeholders):
                raise ValueError(f"template {r.to!r} uses placeholders that {r.match!r} does not define")

    def apply(self, name: str) -> tuple[bool, str | None]:
        """(matched, new name or None for drop)."""
        r = self.rule
        if r.kind == "prefix":
            if not name.startswith(r.match):
                return False, name
            return True, None if r.to is None else r.to + name[len(r.match):]
        if r.kind == "template":
            values = self.src.match(name)
            if values is None:
                return False, name
            return True, None if self.dst is None else self.dst.format(values)
        m = self.rx.search(name)
        if not m:
            return False, name
        return True, None if r.to is None else self.rx.sub(r.to, name, count=1)

    def invert(self, target: str) -> str | None:
        """A source name this rule maps to ``target``, or None."""
        r = self.rule
        if r.to is None:
            return None
        if r.kind == "prefix":
            return r.match + target[len(r.to):] if target.startswith(r.to) else None
        if r.kind == "template":
            values = self.dst.match(target)
            return None if values is None else self.src.format(values)
        if self.inv_rx is None:
            return None
        m = self.inv_rx.search(target)
        return self.inv_rx.sub(r.inverse_to, target, count=1) if m else None


class Renamer:
    def __init__(self, rules: list[RenameRule]):
        self.rules = [CompiledRename(r, i) for i, r in enumerate(rules)]

    def __call__(self, name: str) -> str | None:
        return self.apply(name)[1]

    def apply(self, name: str) -> tuple[int | None, str | None]:
        """(index of the rule that matched or None, the new name or None for drop)."""
        for r in self.rules:
            matched, new = r.apply(name)
            if matched:
                return r.index, new
        return None, name

    def inverse(self, target: str) -> str:
        """The source name for ``target`` (checked: renaming it gives ``target`` back)."""
        candidates = [s for r in self.rules if (s := r.invert(target)) is not None] + [target]
        for src in candidates:
            if self(src) == target:
                return src
        raise ValueError(
            f"no rename rule maps a source name to {target!r} (a regex rule needs inverse_match/inverse_to)"
        )
