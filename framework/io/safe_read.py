"""Reading user files with bounded work: regular files only, byte limits while reading.

- :func:`open_regular`: ``stat`` refuses FIFOs, devices, sockets and directories before
  anything is opened; the file is then opened non-blocking (a FIFO swapped in after the
  ``stat`` cannot block) and ``fstat`` checked again.
- :func:`read_limited`: at most ``limit`` bytes, counted while reading (``st_size`` is 0
  for ``/dev/zero`` and lies for growing files); one more byte and the file is refused.
- :func:`load_json`: :func:`read_limited` + strict JSON (no ``NaN``/``Infinity``, no
  integers past Python's digit limit, bounded nesting), one-line :class:`UserError` each.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import UserError

#: a drafter's or target's config.json (real ones are a few KiB)
MAX_CONFIG_BYTES = 16 << 20
#: a safetensors index (100 000 tensors take ~7 MiB)
MAX_INDEX_BYTES = 64 << 20
#: nesting depth of JSON accepted (configs nest 3-4 levels)
MAX_JSON_DEPTH = 64

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a non-regular ``st_mode`` is, for messages ("a FIFO", "a directory", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")



def is_regular(path: Path) -> bool:
    """``path`` exists (links followed) and is a regular file."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def check_regular(path: Path, what: str = "") -> os.stat_result:
    """``os.stat(path)`` if it is a regular file, else a one-line :class:`UserError`."""
    label = f"{path}{': ' + what if what else ''}"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{label}: does not exist") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{label}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{label}: is {file_kind(st.st_mode)}, not a regular file")
    return st


def open_regular(path: Path, what: str = "") -> BinaryIO:
    """``path`` opened for binary reading, refused unless a regular file (checked twice)."""
    check_regular(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise UserError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{path}: is {file_kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_limited(path: Path, limit: int, what: str = "") -> bytes:
    """The bytes of regular file ``path``; refused past ``limit`` bytes (counted while reading)."""
    with open_regular(path, what) as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise UserError(f"{path}: cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise UserError(f"{path}: larger than {limit} bytes{' for ' + what if what else ''}; refused")
    return data


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def _depth(text: str) -> int:
    """Deepest bracket nesting of JSON text, strings skipped (linear, no recursion).

    Without a backslash no string holds a quote, so splitting on ``"`` leaves the text
    outside strings at even positions (fast path, C loops); otherwise strings are removed
    by a regex. Only the brackets are then walked."""
    if "\\" not in text:
        outside = "".join(text.split('"')[::2]).encode("utf-8", "surrogatepass")
        brackets = outside.translate(None, _NOT_BRACKET).decode("ascii")
    else:
        brackets = "".join(_BRACKET.findall(_STRING.sub("", text)))
    depth = best = 0
    for ch in brackets:
        if ch == "[" or ch == "{":
            depth += 1
            if depth > best:
                best = depth
        else:
            depth -= 1
    return best


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def parse_json(data: bytes, path: Path) -> Any:
    """Strict JSON from ``data``: UTF-8, nesting <= :data:`MAX_JSON_DEPTH`, no NaN/Infinity,
    no number that overflows a float, no integer longer than Python converts."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    if ("[" in text or "{" in text) and _depth(text) > MAX_JSON_DEPTH:
        raise UserError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels; refused")

    def parse_float(s: str) -> float:
        v = float(s)
        if v in (float("inf"), float("-inf")):
            raise ValueError(f"number {s[:20]}{'...' if len(s) > 20 else ''} overflows a float")
        return v

    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=parse_float)
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply; refused") from None
    except ValueError as e:  # JSONDecodeError, NaN/Infinity, huge ints (int max str digits)
        msg = str(e).splitlines()[0]
        raise UserError(f"{path}: not valid JSON ({msg[:200]})") from None


def load_json(path: Path, limit: int = MAX_CONFIG_BYTES, what: str = "") -> Any:
    """:func:`parse_json` of regular file ``path`` read with :func:`read_limited`."""
    return parse_json(read_limited(path, limit, what), path)
