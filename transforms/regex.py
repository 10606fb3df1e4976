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


def compile_regex(pattern: str):
    """Compile a spec regex with RE2; ValueError (one line) when it is not one."""
    if not isinstance(pattern, str):
        raise ValueError("regex must be a string")
    if len(pattern) > MAX_REGEX_LEN:
        raise ValueError(f"regex longer than {MAX_REGEX_LEN} characters")
    try:
        return re2.compile(pattern, _OPTIONS)
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
    return re2.compile(pattern, _OPTIONS)
