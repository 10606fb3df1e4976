"""``W - 1`` (how far a window ``W`` reaches) is computed in one place, ``lowering.base.window_reach``
(issue 38 item 6): the product's code computes no ``window - 1`` elsewhere (comments and
docstrings, which state the math, are not code)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from draftsmith.lowering.base import MaskSpec, window_reach

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("framework", "lowering", "transforms", "draftsmith")
WINDOW_MINUS_ONE = re.compile(r"window\)?\s*-\s*1\b")


def code_of(path: Path) -> str:
    """The file's code with strings and comments dropped."""
    toks = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return " ".join(t.string for t in toks if t.type not in (tokenize.STRING, tokenize.COMMENT))


def test_reach_is_w_minus_one():
    assert [window_reach(w) for w in (None, 1, 2, 4096)] == [None, 0, 1, 4095]
    assert MaskSpec(causal=False, window=7).reach == 6 and MaskSpec(causal=True).reach is None
    assert MaskSpec(causal=False, window=7).bounds == (6, 6) and MaskSpec(causal=True, window=7).bounds == (6, 0)


def test_window_minus_one_is_computed_once():
    found = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for d in PRODUCT for p in sorted((ROOT / d).rglob("*.py"))
             for m in WINDOW_MINUS_ONE.finditer(code_of(p))]
    assert found == ["lowering/base.py: 'window - 1'"], found
