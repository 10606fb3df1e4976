"""Dotted keys into nested config dicts (``dflash_config.block_size``)."""

from __future__ import annotations

from ..spec.overrides import reach


def get_dotted(d: dict, key: str, default=None):
    """The value at dotted ``key`` in nested mappings (``default`` when a step is missing);
    walked by :func:`~draftsmith.framework.spec.overrides.reach`, the one walk into nested data."""
    parts = key.split(".")
    value, found = reach(d, parts)
    return value if found == len(parts) else default


def set_dotted(d: dict, key: str, value) -> None:
    parts = key.split(".")
    cur = d
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = cur[part] = {}
        cur = nxt
    cur[parts[-1]] = value


def pop_dotted(d: dict, key: str) -> None:
    parts = key.split(".")
    cur = d
    for part in parts[:-1]:
        cur = cur.get(part)
        if not isinstance(cur, dict):
            return
    cur.pop(parts[-1], None)


def spelled_key(raw: dict, sections: list, key: str) -> str:
    """``key`` as the raw config spells it (``text_config.head_dim`` when it sits in a section)."""
    top = key.split(".")[0]
    for sec in sections:
        if isinstance(raw.get(sec), dict) and top in raw[sec]:
            return f"{sec}.{key}"
    return key
