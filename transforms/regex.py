"""User regexes (spec rename/transform rules) under RE2: linear time in the name's length.

RE2 has no backtracking, so no pattern can hang a run (``.*.*.*.*.*.*!`` on a long name
is as fast as ``a``). The price: no lookaround and no backreferences inside a pattern;
such a pattern is refused in one line. Replacement templates (``\\1``, ``\\g<name>``)
work as in Python's ``re``.
"""

from __future__ import annotations

import re

import re2

MAX_REGEX_LEN = 512
#: memory budget RE2 may use for one compiled pattern (bytes); bigger programs are refused
MAX_PROGRAM_BYTES = 8 << 20

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # errors become our one-line ValueError, not absl log spam
_OPTIONS.max_mem = MAX_PROGRAM_BYTES

_GROUP_REF = re.compile(r"\\(?:g<([^>]*)>|(\d+))")


class Regex:
    """A compiled RE2 pattern with the part of ``re.Pattern``'s API draftsmith uses
    (``search``, ``match``, ``fullmatch``, ``sub``, ``groups``, ``groupindex``, ``pattern``).

    google-re2's ``str`` methods cost several microseconds of Python per call even when
    nothing matches; a plan tries every rule on every tensor name (100 000 names: 500 000
    tries). So each try first asks the RE2 engine itself for a yes/no on the UTF-8 bytes
    (one C call, same engine, same anchoring) and builds a match object only on a hit.
    """

    __slots__ = ("_rx", "_engine", "pattern", "groups", "groupindex")

    def __init__(self, rx):
        self._rx = rx
        engine = getattr(rx, "_regexp", None)  # google-re2's compiled RE2 (pybind11)
        self._engine = engine if _ANCHORS is not None and callable(getattr(engine, "Match", None)) else None
        self.pattern, self.groups, self.groupindex = rx.pattern, rx.groups, rx.groupindex

    def _try(self, anchor, text: str, public):
        """None, or the match: built from the engine's spans for ASCII text (byte offsets
        are character offsets there), else by google-re2's own ``str`` method."""
        if self._engine is None or not isinstance(text, str):
            return public(text)
        b = text.encode("utf-8")
        spans = self._engine.Match(anchor, b, 0, len(b))
        if spans[0] == _NO_SPAN:
            return None
        return AsciiMatch(text, spans, self.groupindex) if len(b) == len(text) else public(text)

    def search(self, text: str):
        return self._try(_UNANCHORED, text, self._rx.search)

    def test(self, text: str) -> bool:
        """``search(text) is not None``, without building a match object."""
        if self._engine is None or not isinstance(text, str):
            return self._rx.search(text) is not None
        b = text.encode("utf-8")
        return self._engine.Match(_UNANCHORED, b, 0, len(b))[0] != _NO_SPAN

    def match(self, text: str):
        return self._try(_ANCHOR_START, text, self._rx.match)

    def fullmatch(self, text: str):
        return self._try(_ANCHOR_BOTH, text, self._rx.fullmatch)

    def sub(self, repl, text: str, count: int = 0) -> str:
        return self._rx.sub(repl, text, count=count)

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"


class AsciiMatch:
    """A match in ASCII text from RE2's group spans: ``group``, ``groups``, ``groupdict``,
    ``span``, ``start``, ``end``, ``m[i]`` as ``re.Match`` has them (unmatched groups: None)."""

    __slots__ = ("string", "_spans", "_names")

    def __init__(self, text: str, spans, names: dict[str, int]):
        self.string, self._spans, self._names = text, spans, names

    def _index(self, g) -> int:
        return self._names[g] if isinstance(g, str) else g

    def span(self, g=0) -> tuple[int, int]:
        return tuple(self._spans[self._index(g)])

    def start(self, g=0) -> int:
        return self.span(g)[0]

    def end(self, g=0) -> int:
        return self.span(g)[1]

    def _one(self, g):
        s, e = self._spans[self._index(g)]
        return None if s == -1 else self.string[s:e]

    def group(self, *gs):
        if len(gs) <= 1:
            return self._one(gs[0] if gs else 0)
        return tuple(self._one(g) for g in gs)

    __getitem__ = _one

    def groups(self, default=None) -> tuple:
        return tuple(default if (v := self._one(i)) is None else v for i in range(1, len(self._spans)))

    def groupdict(self, default=None) -> dict:
        spans, text = self._spans, self.string
        return {n: default if spans[i][0] == -1 else text[spans[i][0] : spans[i][1]] for n, i in self._names.items()}


_NO_SPAN = (-1, -1)
_ANCHORS = getattr(re2, "_Anchor", None)  # absent in another google-re2: every try takes the str path
_UNANCHORED, _ANCHOR_START, _ANCHOR_BOTH = ((_ANCHORS.UNANCHORED, _ANCHORS.ANCHOR_START, _ANCHORS.ANCHOR_BOTH)
                                            if _ANCHORS is not None else (None, None, None))


def _engine_answers_as_expected() -> bool:
    """The engine path uses google-re2 internals (``_regexp.Match``, ``_Anchor``): probe them
    once on known inputs; any other answer (another release) turns the fast path off."""
    try:
        eng = re2.compile("a(b)?c", _OPTIONS)._regexp
        return (tuple(map(tuple, eng.Match(_UNANCHORED, b"xacx", 0, 4))) == ((1, 3), _NO_SPAN)
                and eng.Match(_ANCHOR_BOTH, b"abc", 0, 3)[0] == (0, 3)
                and eng.Match(_ANCHOR_START, b"xabc", 0, 4)[0] == _NO_SPAN)
    except Exception:  # noqa: BLE001 - no such internals: the public path
        return False


if _ANCHORS is not None and not _engine_answers_as_expected():
    _ANCHORS = None


def compile_regex(pattern: str):
    """Compile a spec regex with RE2; ValueError (one line) when it is not one."""
    if not isinstance(pattern, str):
        raise ValueError("regex must be a string")
    if len(pattern) > MAX_REGEX_LEN:
        raise ValueError(f"regex longer than {MAX_REGEX_LEN} characters")
    try:
        return Regex(re2.compile(pattern, _OPTIONS))
    except Exception as e:  # re2.error: message is bytes or str
        msg = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ValueError(f"invalid regex {pattern!r} (RE2 syntax: no lookaround or backreferences): {msg}") from None


def check_template(rx, pattern: str, repl: str) -> None:
    """Refuse a replacement ``repl`` naming groups that ``rx`` lacks (``\\2``, ``\\g<x>``)."""
    if not isinstance(repl, str):
        raise ValueError(f"replacement for regex {pattern!r} must be a string")
    names = dict(rx.groupindex)
    for m in _GROUP_REF.finditer(repl):
        name, num = m.group(1), m.group(2)
        ref = name if name is not None else num
        if ref.isdigit():
            if int(ref) > rx.groups:
                raise ValueError(f"replacement {repl!r} does not fit regex {pattern!r}: no group {ref}")
        elif ref not in names:
            raise ValueError(f"replacement {repl!r} does not fit regex {pattern!r}: no group named {ref!r}")


def compile_built(pattern: str):
    """Compile a regex that draftsmith built from user text (escaped literals, fixed groups)
    with RE2, without the length limit of :func:`compile_regex`."""
    return Regex(re2.compile(pattern, _OPTIONS))
