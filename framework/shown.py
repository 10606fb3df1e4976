"""Text from files shown on a terminal: one line, nothing the terminal would act on.

:func:`shown` escapes what a name from a checkpoint, config or spec may hold that would split
a message line or reach the terminal raw: control characters (C0, DEL, C1: newlines, ``\\r``,
ANSI escapes), format characters (bidi overrides, zero-width marks), line/paragraph
separators and lone surrogates (not encodable as UTF-8). Everything else, non-ASCII letters
included, is kept.
"""

from __future__ import annotations

import unicodedata

_ESCAPED = {"Cc", "Cf", "Cs", "Zl", "Zp"}
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _SHORT:
        return _SHORT[ch]
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def shown(text: str) -> str:
    """``text`` with every control, format, separator and surrogate character escaped."""
    text = str(text)
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _ESCAPED else c for c in text)


def is_shown_as_is(text: str) -> bool:
    """``text`` holds nothing :func:`shown` would escape."""
    return shown(text) == text
