"""Dotted keys into nested config dicts (``dflash_config.block_size``)."""

from __future__ import annotations

from typing import Any


def get_dotted(d: dict, key: str, default=None):
    cur: Any = d
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


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
