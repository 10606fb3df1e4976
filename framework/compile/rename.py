"""Rename rules (vLLM-style kinds): ``prefix``, ``template``, ``regex``; ``to: null`` drops.

Rules are tried in order and the first that matches a name applies; a name no rule
matches keeps its name. ``inverse`` maps a target name back to a source name (used by
``synth``); ``regex`` rules invert only through their explicit ``inverse_match``/``inverse_to``.
"""

from __future__ import annotations

from ...registry import Registry
from ...transforms.names import NameTemplate
from ...transforms.regex import compile_regex
from ..spec.schema import RenameRule


class RenameKind:
    """One compiled rule of its kind: ``apply`` (source -> target) and ``invert``."""

    def __init__(self, rule: RenameRule, index: int):
        self.rule, self.index = rule, index

    def apply(self, name: str) -> tuple[bool, str | None]:
        """(matched, new name or None for drop)."""
        raise NotImplementedError

    def invert(self, target: str) -> str | None:
        """A source name this rule maps to ``target``, or None."""
        raise NotImplementedError


#: The closed table of rename kinds (``RenameRule.kind``), like transforms and lowerings.
RENAME_KINDS: Registry[type[RenameKind]] = Registry("rename kind")


class PrefixRename(RenameKind):
    """``prefix``: replace a leading string."""

    def apply(self, name):
        r = self.rule
        if not name.startswith(r.match):
            return False, name
        return True, None if r.to is None else r.to + name[len(r.match):]

    def invert(self, target):
        r = self.rule
        if r.to is None:
            return None
        return r.match + target[len(r.to):] if target.startswith(r.to) else None


class TemplateRename(RenameKind):
    """``template``: an invertible name template (``{x}`` one component, ``{x*}`` several)."""

    def __init__(self, rule, index):
        super().__init__(rule, index)
        self.src = NameTemplate(rule.match)
        self.dst = NameTemplate(rule.to) if rule.to is not None else None
        if self.dst is not None and set(self.dst.placeholders) - set(self.src.placeholders):
            raise ValueError(f"template {rule.to!r} uses placeholders that {rule.match!r} does not define")

    def apply(self, name):
        values = self.src.match(name)
        if values is None:
            return False, name
        return True, None if self.dst is None else self.dst.format(values)

    def invert(self, target):
        if self.dst is None:
            return None
        values = self.dst.match(target)
        return None if values is None else self.src.format(values)


class RegexRename(RenameKind):
    """``regex``: a Python regex with groups; inverts only through ``inverse_match``/``inverse_to``."""

    def __init__(self, rule, index):
        super().__init__(rule, index)
        self.rx = compile_regex(rule.match)
        self.inv_rx = compile_regex(rule.inverse_match) if rule.inverse_match else None

    def apply(self, name):
        m = self.rx.search(name)
        if not m:
            return False, name
        return True, None if self.rule.to is None else self.rx.sub(self.rule.to, name, count=1)

    def invert(self, target):
        if self.rule.to is None or self.inv_rx is None:
            return None
        m = self.inv_rx.search(target)
        return self.inv_rx.sub(self.rule.inverse_to, target, count=1) if m else None


RENAME_KINDS.register("prefix", PrefixRename)
RENAME_KINDS.register("template", TemplateRename)
RENAME_KINDS.register("regex", RegexRename)


class Renamer:
    def __init__(self, rules: list[RenameRule]):
        self.rules = [RENAME_KINDS.lookup(r.kind)(r, i) for i, r in enumerate(rules)]

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
