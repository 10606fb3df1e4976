"""Read evaluation prompts from a text file (one prompt per non-empty line) or JSONL.

Bounded: the file (:data:`MAX_PROMPTS_BYTES`), each prompt (:data:`MAX_PROMPT_BYTES` of
UTF-8) and their number (:data:`MAX_PROMPTS`); JSON lines are parsed strictly (no NaN, no
integer past Python's digit limit) and a prompt must be valid Unicode (no lone surrogate).
Tokens are bounded by the target (:func:`check_prompt_tokens`). Every refusal is one line
naming the file and line."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..io.safe_read import parse_json, read_limited

#: the largest prompts file read (bytes)
MAX_PROMPTS_BYTES = 64 << 20
#: the longest prompt (UTF-8 bytes; a target's whole context is a few hundred KiB of text)
MAX_PROMPT_BYTES = 1 << 20
#: the most prompts one run reads
MAX_PROMPTS = 100_000

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
    # lines end at "\n" only (a "\r" before it is dropped): U+2028, U+0085 and the other breaks
    # that str.splitlines honours are characters inside a prompt (and valid inside JSON strings)
    for n, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        if p.suffix == ".jsonl":
            try:  # strict: no NaN, no 5000-digit integer, bounded nesting
                obj = parse_json(line.encode("utf-8", "surrogatepass"), f"{p}:{n}")
            except UserError as e:
                reason = e.problems[0].removeprefix(f"{p}:{n}: ")
                raise UserError(f"{p}:{n}: not JSON ({reason})") from None
            key = next((k for k in JSONL_KEYS if isinstance(obj, dict) and k in obj), None)
            if key is None or not isinstance(obj[key], str) or not obj[key]:
                raise UserError(f"{p}:{n}: expected an object with a non-empty string 'prompt' (or 'text')")
            prompt = obj[key]
        else:
            prompt = line
        try:
            size = len(prompt.encode("utf-8"))
        except UnicodeEncodeError as e:
            raise UserError(f"{p}:{n}: the prompt holds a lone surrogate ({prompt[e.start]!a} at character "
                            f"{e.start}); not valid Unicode") from None
        if size > MAX_PROMPT_BYTES:
            raise UserError(f"{p}:{n}: prompt of {size} bytes, more than {MAX_PROMPT_BYTES}; refused")
        if len(prompts) == MAX_PROMPTS:
            raise UserError(f"{p}: more than {MAX_PROMPTS} prompts; split the file")
        prompts.append(prompt)
    if not prompts:
        raise UserError(f"{p}: no prompts")
    return prompts[:limit] if limit else prompts


def check_prompt_tokens(where: str, n_tokens: int, max_new_tokens: int, max_draft_len: int,
                        max_positions: int | None) -> None:
    """Refuse a prompt whose ``n_tokens`` plus what decoding adds (``max_new_tokens`` and one
    block of ``max_draft_len`` drafts) exceed the target's ``max_positions``."""
    if n_tokens < 1:
        raise UserError(f"{where}: encodes to no tokens")
    need = n_tokens + max_new_tokens + max_draft_len
    if max_positions is not None and need > max_positions:
        raise UserError(f"{where}: {n_tokens} tokens + max_new_tokens={max_new_tokens} + {max_draft_len} drafts "
                        f"need {need} positions, more than the target's max_position_embeddings {max_positions}")
