"""Dotted overrides on a spec's data (the library's, not Hydra's).

- ``key.path=value``: replace an existing value (list items by index: ``layers.0``);
- ``+key.path=value``: add a key that is not there yet;
- ``~key.path``: remove a key.
Keys may carry the command line's ``adapter.`` prefix. Values are read as YAML (safe
loader): ``2048``, ``true``, ``null``, ``"text"``, ``[a, b]``.

A key whose name holds dots (``config.fields`` and ``synth.tiny`` are keyed by dotted config
keys) is addressed as spelled: ``config.fields.dflash_config.block_size.required=false``
resolves ``dflash_config.block_size`` because that key exists (one existing key must match;
two candidate spellings are refused as ambiguous), or in brackets, which never split and also
name a key that is not there yet: ``+config.fields[dflash_config.new_key]={default: 1}``.

No interpolation: a value holding ``${`` is refused on the final tree (spec/loading.py).
"""

from __future__ import annotations

import copy
import difflib
import re
from pathlib import Path
from typing import Any, Iterable

import yaml

from ..errors import UserError
from .override_args import (INSTANTIATION_KEYS, INTERPOLATION, MAX_DIGITS, MAX_KEY_CHARS, MAX_KEY_STEPS,
                            MAX_VALUE_CHARS, _LONG_NUMBER, check_value, is_index, short, split_argument)


class _Bracketed(str):
    """A key written in brackets: one step whatever dots it holds, never a list index."""


_STEP = re.compile(r"\[([^\[\]]+)\]|([^.\[\]]+)|(\.)|(.)")


def _steps(key: str, where: str = "override") -> list:
    """``a.b[c.d].0`` -> ``['a', 'b', 'c.d', 0]`` (the bracketed step a :class:`_Bracketed`)."""
    key = key.removeprefix("adapter.")
    out: list = []
    for m in _STEP.finditer(key):
        if m.group(1) is not None:
            out.append(_Bracketed(m.group(1)))
        elif m.group(2) is not None:
            out.append(int(m.group(2)) if is_index(m.group(2)) else m.group(2))
        elif m.group(4) is not None:
            raise UserError(f"{where}: unbalanced brackets in the key {key!r}")
    return out


def resolve_steps(data: Any, steps: list, where: str) -> list:
    """``steps`` with runs of plain steps joined where the joined spelling (``a.b``) is an existing
    key of the mapping reached so far and the single step is not; the path beyond what exists is
    left as written."""
    out, cur, i = [], data, 0
    while i < len(steps):
        p = steps[i]
        if isinstance(cur, dict) and not isinstance(p, _Bracketed):
            plain = 0
            while i + plain < len(steps) and not isinstance(steps[i + plain], _Bracketed):
                plain += 1
            hits = [n for n in range(1, plain + 1) if ".".join(map(str, steps[i:i + n])) in cur
                    or (n == 1 and _step(cur, p) in cur)]
            if len(hits) > 1:
                spelled = " or ".join(repr(".".join(map(str, steps[i:i + n]))) for n in hits)
                raise UserError(f"{where}: {spelled} are both keys here; write the one meant in brackets, "
                                f"e.g. [{'.'.join(map(str, steps[i:i + hits[-1]]))}]")
            n = hits[0] if hits else 1
            p = _step(cur, p) if n == 1 else ".".join(map(str, steps[i:i + n]))
            i += n
        else:
            i += 1
        out.append(p)
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and isinstance(p, int) and p < len(cur):
            cur = cur[p]
        else:
            cur = None
    return out


def check_argument(arg: str, data: Any, origin: str = "command line") -> bool:
    """Refuse a malformed or unbounded override ``arg`` against the spec ``data`` (every field
    filled in) in one line; return whether its path steps into a list."""
    where = f"{origin}: {short(arg)}"
    sigil, key, _, value = split_argument(arg)
    if len(key) > MAX_KEY_CHARS:
        raise UserError(f"{where}: the key has {len(key)} characters; at most {MAX_KEY_CHARS}")
    if len(value) > MAX_VALUE_CHARS:
        raise UserError(f"{where}: the value has {len(value)} characters; at most {MAX_VALUE_CHARS}")
    if _LONG_NUMBER.search(value):
        raise UserError(f"{where}: the value holds a number of more than {MAX_DIGITS} digits")
    bare = key.removeprefix("adapter.")
    if INTERPOLATION in key:
        raise UserError(f"{where}: `${{` is refused in a key (no interpolation: overrides are data)")
    if re.search(r"(^|\.)\.|\.$|^$", re.sub(r"\[[^\[\]]*\]", "[]", bare)):
        raise UserError(f"{where}: the key has an empty step ({key!r})")
    steps = _steps(key, where)
    if len(steps) > MAX_KEY_STEPS:
        raise UserError(f"{where}: the key has {len(steps)} steps; at most {MAX_KEY_STEPS}")
    for p in steps:
        if isinstance(p, str) and p in INSTANTIATION_KEYS:
            raise UserError(f"{where}: `{p}` is refused (overrides are data: no instantiation keys)")
        if isinstance(p, str) and not isinstance(p, _Bracketed) and p.isdigit() and not is_index(p):
            raise UserError(f"{where}: step {p!r} is not a number in ASCII digits 0-9")
    steps = resolve_steps(data, steps, where)
    cur, crosses = data, False
    for i, p in enumerate(steps):
        here = ".".join(map(str, steps[:i])) or "adapter"
        if isinstance(cur, list):
            crosses = True
            if isinstance(p, _Bracketed) or not isinstance(p, int):
                raise UserError(f"{where}: {here} is a list of {len(cur)} item(s): its items are {here}.0, "
                                f"{here}.1, ... (a non-negative integer in ASCII digits; brackets name a mapping key), "
                                f"not {'[' + str(p) + ']' if isinstance(p, _Bracketed) else repr(p)}")
            if p < len(cur):
                cur = cur[p]
                continue
            if p == len(cur) and sigil == "+" and i == len(steps) - 1:
                break  # +list.N=VALUE appends one item
            add = f"; +{here}.{len(cur)}=VALUE adds one at the end" if i == len(steps) - 1 else ""
            raise UserError(f"{where}: {here} has {len(cur)} item(s), no item {p}{add}")
        if isinstance(cur, dict):
            k = p if p in cur else str(p) if str(p) in cur else None
            if k is None:
                break
            cur = cur[k]
        else:
            break
    return crosses


def reach(data: Any, steps) -> tuple[Any, int]:
    """How far ``steps`` lead into ``data``: (the value reached, how many leading steps exist).
    The value is the one at ``steps`` when every step exists, else the mapping or list where the
    walk stopped. A step is a mapping key, or an ``int`` indexing a list. The one walk into nested
    data: dotted keys (``compile.dotted.get_dotted``) and the command line's keys read through it."""
    cur = data
    for i, p in enumerate(steps):
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and isinstance(p, int) and p < len(cur):
            cur = cur[p]
        else:
            return cur, i
    return cur, len(steps)


def addresses_dotted_key(data: Any, key: str, where: str = "override") -> bool:
    """Whether ``key`` (an override's key) is one for a dotted key: a bracketed step, an existing
    dotted key (:func:`resolve_steps`), or a missing step inside a mapping keyed by dotted names."""
    steps = _steps(key, where)
    if any(isinstance(p, _Bracketed) for p in steps):
        return True
    steps = resolve_steps(data, steps, where)
    if any(isinstance(p, str) and "." in p for p in steps):
        return True
    where, found = reach(data, steps)
    return found < len(steps) and isinstance(where, dict) and any("." in str(k) for k in where)


def _step(cur: Any, p):
    """``p`` as a key of ``cur``: list index (int) or mapping key (as spelled, else its text)."""
    if isinstance(cur, dict) and p not in cur and str(p) in cur:
        return str(p)
    if isinstance(p, _Bracketed):
        return str(p)
    return p if isinstance(cur, list) or p in cur else str(p)


def _parent(data: Any, steps: list, where: str, create: bool = False):
    cur = data
    for i, p in enumerate(steps[:-1]):
        if isinstance(cur, list) and isinstance(p, int) and p < len(cur):
            cur = cur[p]
        elif isinstance(cur, dict) and _step(cur, p) in cur and cur[_step(cur, p)] is not None:
            cur = cur[_step(cur, p)]
        elif isinstance(cur, dict) and create:  # +a.b.c=v makes the missing mappings
            cur[str(p)] = {}
            cur = cur[str(p)]
        else:
            spelled = [".".join(map(str, steps[i:i + n])) for n in range(1, len(steps) - i)]
            close = [c for t in spelled if isinstance(cur, dict)
                     for c in difflib.get_close_matches(t, list(map(str, cur)), n=1)]
            hint = f" (did you mean {close[-1]!r}?)" if close else ""
            raise UserError(f"{where}: {'.'.join(map(str, steps[:i + 1]))}: no such key{hint}")
    return cur


def apply_overrides(data: dict, overrides: Iterable[str], path: Path | None = None,
                    origin: str | None = None) -> dict:
    """A copy of ``data`` with ``overrides`` applied in order (see the module docstring). Errors
    name ``path`` (a spec file's overrides) or ``origin`` (e.g. ``command line``)."""
    out = copy.deepcopy(data)
    for o in overrides:
        where = f"{origin}: {short(o)}" if origin else f"{path}: override {short(o)}" if path else f"override {short(o)}"
        check_argument(o, out, origin or (f"{path}: override" if path else "override"))
        sigil = o[: len(o) - len(o.lstrip("+~"))]
        key, eq, text = o[len(sigil):].partition("=")
        steps = resolve_steps(out, _steps(key, where), where)
        if not steps or (sigil != "~" and not eq):
            raise UserError(f"{where}: expected key=value, +key=value or ~key")
        parent = _parent(out, steps, where, create=sigil == "+")
        last = _step(parent, steps[-1]) if isinstance(parent, dict) else steps[-1]
        present = (isinstance(parent, dict) and last in parent) or (
            isinstance(parent, list) and isinstance(last, int) and last < len(parent))
        if sigil == "~":
            if present:
                del parent[last]
            continue
        try:
            value = yaml.safe_load(text) if text != "" else ""
        except yaml.YAMLError as e:
            raise UserError(f"{where}: value is not YAML ({str(e).splitlines()[0]})") from None
        except ValueError as e:  # e.g. an integer past Python's digit limit inside a YAML value
            raise UserError(f"{where}: value cannot be read ({e})") from None
        check_value(value, where)
        if sigil == "" and not present:
            known = sorted(map(str, parent)) if isinstance(parent, dict) else []
            close = difflib.get_close_matches(str(last), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UserError(f"{where}: unknown key {key.removeprefix('adapter.')}{hint}; use +key=value to add one")
        if sigil == "+" and present:
            raise UserError(f"{where}: {key} is already set; use {key}=value to replace it")
        if not isinstance(parent, (dict, list)):
            raise UserError(f"{where}: {'.'.join(map(str, steps[:-1]))} is not a mapping")
        if isinstance(parent, list) and last == len(parent):
            parent.append(value)  # +list.N=VALUE with N the list's length (check_argument allowed it)
        else:
            parent[last] = value
    return out
