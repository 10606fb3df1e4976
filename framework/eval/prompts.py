"""Read evaluation prompts from a text file (one prompt per non-empty line) or JSONL."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserError
from ..io.safe_read import read_limited

#: the largest prompts file read (bytes)
MAX_PROMPTS_BYTES = 64 << 20

JSONL_KEYS = ("prompt", "text")


def read_prompts(path: str | Path, limit: int | None = None) -> list[str]:
    """Prompts of ``path``: ``*.jsonl`` -> one JSON object per line with a string ``prompt``
    (or ``text``); any other file -> each non-empty line is one prompt (its text without the
    line break). ``limit``: keep the first ``limit``. Raises :class:`UserError` naming the file
    and line for anything else (missing file, bad JSON, no prompt key, empty result).
    """
    p = Path(path)
    if not p.exists():
        raise UserError(f"prompts={path}: no such file")
    data = read_limited(p, MAX_PROMPTS_BYTES, "a prompts file")  # regular files only, bounded
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    prompts: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if p.suffix == ".jsonl":
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{p}:{n}: not JSON ({e.msg})") from None
            key = next((k for k in JSONL_KEYS if isinstance(obj, dict) and k in obj), None)
            if key is None or not isinstance(obj[key], str) or not obj[key]:
                raise UserError(f"{p}:{n}: expected an object with a non-empty string 'prompt' (or 'text')")
            prompts.append(obj[key])
        else:
            prompts.append(line)
    if not prompts:
        raise UserError(f"{p}: no prompts")
    return prompts[:limit] if limit else prompts
