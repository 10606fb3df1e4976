"""Override arguments are data, checked as data, before any parser sees them.

:func:`check_argument` takes one ``adapter.KEY=VALUE`` argument (``+`` adds, ``~`` removes)
and refuses, in one line naming the argument:

- a key longer than :data:`MAX_KEY_CHARS` characters or of more than :data:`MAX_KEY_STEPS`
  steps, a value longer than :data:`MAX_VALUE_CHARS` (checked before parsing: parsing is
  then linear and bounded), a number of more than :data:`MAX_DIGITS` digits in the value;
- an empty step (``a..b``), a step of non-ASCII digits (``²``);
- a step into a list that is not a plain index: brackets, a negative or non-ASCII number, a
  name; an index past the list's end (``+`` may add exactly one item, at the end);
- an instantiation key (:data:`INSTANTIATION_KEYS`) or ``${`` anywhere in the key.

:func:`data_problems` is the one list of what a spec cannot hold, run on a spec file as read
(``loading.check_data_only``), on each override's value and on the composed tree;
:func:`check_value` refuses a parsed value a spec cannot hold (a date, a set, bytes, a non-finite
float, an integer past :data:`MAX_INT`) and instantiation keys or ``${`` inside it (a mapping,
a list item). :func:`check_composed` runs the same checks on the final composed tree and names
the argument that put a refused thing there.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable

from ..errors import UserError

#: the keys with which Hydra's ``instantiate`` turns data into calls; never in a spec or an override
INSTANTIATION_KEYS = ("_target_", "_args_", "_partial_", "_recursive_", "_convert_")
INTERPOLATION = "${"
#: longest override key (characters after the sigil, ``adapter.`` included) and most steps in it
MAX_KEY_CHARS = 256
MAX_KEY_STEPS = 32
#: longest override value (characters)
MAX_VALUE_CHARS = 65536
#: most digits in one number of an override value, and the largest integer magnitude it may hold
MAX_DIGITS = 64
MAX_INT = 2**63 - 1

_ASCII_INDEX = re.compile(r"[0-9]+")
_LONG_NUMBER = re.compile(r"[0-9]{%d,}" % (MAX_DIGITS + 1))


def key_path(path: Iterable) -> str:
    """A spec key path as users write it: ``attention.layers[2].causal``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top>"


def short(arg: str, limit: int = 120) -> str:
    """``arg`` as named in a message: at most ``limit`` characters, with the full length said."""
    return arg if len(arg) <= limit else f"{arg[:limit]}... ({len(arg)} characters)"


def is_index(step: Any) -> bool:
    """A list index as an override writes it: ASCII digits only (``int`` or their text)."""
    return isinstance(step, int) or (isinstance(step, str) and _ASCII_INDEX.fullmatch(step) is not None)


def split_argument(arg: str) -> tuple[str, str, bool, str]:
    """(sigil, key, has '=', value) of an override argument."""
    sigil = "++" if arg.startswith("++") else arg[:1] if arg[:1] in "+~" else ""
    key, eq, value = arg[len(sigil):].partition("=")
    return sigil, key, bool(eq), value


def data_problems(value: Any, path: tuple = ()) -> Iterable[tuple[tuple, str]]:
    """(key path, problem) for everything in ``value`` a spec cannot hold or must refuse."""
    stack = [(path, value)]
    while stack:
        p, v = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    yield p, f"a key of type {type(k).__name__} ({k!r}); keys are text or integers"
                    continue
                if k in INSTANTIATION_KEYS:
                    yield p + (k,), f"`{k}` is refused (a spec and overrides are data: no instantiation keys)"
                elif isinstance(k, str) and INTERPOLATION in k:
                    yield p + (k,), "`${` is refused (no interpolation: a spec and command-line values are data)"
                stack.append((p + (k,), x))
        elif isinstance(v, list):
            stack.extend((p + (i,), x) for i, x in enumerate(v))
        elif isinstance(v, str):
            if v in INSTANTIATION_KEYS:
                yield p, f"`{v}` is refused (a spec and overrides are data: no instantiation keys)"
            elif INTERPOLATION in v:
                yield p, "`${` is refused (no interpolation: a spec and command-line values are data)"
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            if abs(v) > MAX_INT:
                yield p, f"an integer of magnitude past {MAX_INT}"
        elif isinstance(v, float):
            if not math.isfinite(v):
                yield p, f"{v} is not a finite number"
        else:
            what = {"date": "a date", "datetime": "a date and time", "bytes": "bytes", "set": "a set"}.get(
                type(v).__name__, f"a {type(v).__name__}")
            yield p, (f"{what} is not a value a spec holds (text, numbers, true/false, null, lists, mappings); "
                      "quote it to mean text")


def check_value(value: Any, where: str) -> None:
    """Refuse an override's parsed ``value`` that a spec cannot hold, in one line per problem."""
    problems = [f"{where}: {'value' if not p else 'value ' + key_path(p)}: {msg}" for p, msg in data_problems(value)]
    if problems:
        raise UserError(*problems)


def check_composed(tree: Any, overrides: list[str], steps_of, origin: str = "command line") -> None:
    """The final composed tree holds nothing refused; each problem names the argument whose path
    reaches it (``steps_of(arg)``: the argument's resolved key path), else ``origin``."""
    problems = []
    for p, msg in data_problems(tree):
        arg = next((o for o in overrides if not o.startswith("~") and _overlaps(steps_of(o), p)), None)
        who = f"{origin}: {short(arg)}" if arg is not None else origin
        problems.append(f"{who}: {key_path(p)}: {msg}")
    if problems:
        raise UserError(*problems)


def _overlaps(a: tuple, b: tuple) -> bool:
    n = min(len(a), len(b))
    return tuple(map(str, a[:n])) == tuple(map(str, b[:n]))
