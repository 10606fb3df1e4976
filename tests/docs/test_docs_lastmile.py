"""The docs a user reads last agree with the code and with themselves (issue 47 points 5 and 8):
the README's excerpt leads with the flagship MiniMax row; every headline number of
docs/benchmarks.md is its table's current row; a config no adapter serves points to ``init``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from draftsmith.framework.compile.adapter import load_adapter, route
from draftsmith.framework.docs.drafters import FLAGSHIP, readme_table_excerpt
from draftsmith.framework.docs.markdown import README_BEGIN, README_END
from draftsmith.framework.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
DATE = re.compile(r"\b(20\d\d-\d\d-\d\d)\b")
RATIO = re.compile(r"\b(\d+\.\d+)x\b")
NUMBER = re.compile(r"\d+\.\d+")


def table_rows(block: str) -> list[list[str]]:
    """The rows of the first markdown table in ``block`` (header included, separator dropped)."""
    rows = [l for l in block.splitlines() if l.startswith("|")]
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    return [c for c in cells if not all(re.fullmatch(r":?-+:?", x) for x in c)]


def test_readme_excerpt_leads_with_the_flagship_minimax_row():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index(README_BEGIN) + len(README_BEGIN):text.index(README_END)]
    rows = table_rows(block)
    spec = load_adapter(FLAGSHIP).spec
    assert FLAGSHIP == "minimax_dspark" and "MiniMax" in spec.docs.model
    assert rows[1][0] == f"`{spec.match.architectures[0]}`" and rows[1][1] == spec.docs.model, rows[1]
    assert table_rows(readme_table_excerpt())[1] == rows[1]  # the generator writes it so


def sections(text: str) -> list[tuple[str, list[str], list[str]]]:
    """``(title, prose lines, table lines)`` per ``## `` section."""
    out = []
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        lines = part.splitlines()
        out.append((lines[0], [l for l in lines[1:] if not l.startswith("|")],
                    [l for l in lines[1:] if l.startswith("|")]))
    return out


def test_benchmark_headlines_are_the_tables_current_rows():
    """In every section of docs/benchmarks.md: no measurement in the prose is dated after the
    table's (a later run is the table), and every ratio the prose quotes (``1.77x``) is a cell of
    the section's tables."""
    checked = 0
    for title, prose, table in sections(BENCHMARKS.read_text(encoding="utf-8")):
        dates = [d for l in table if re.match(r"\|\s*date\b", l) for d in DATE.findall(l)]
        if dates:
            later = [d for l in prose for d in DATE.findall(l) if d > max(dates)]
            assert not later, f"{title}: the prose reports a run of {later}, after the table's {max(dates)}"
            checked += 1
        cells = {float(n) for l in table for n in NUMBER.findall(l)}
        for l in prose:
            for r in RATIO.findall(l):
                assert float(r) in cells, f"{title}: the prose quotes {r}x, which no table row holds: {l}"
    assert checked >= 5


def test_conversion_headline_is_computed_from_its_row():
    """The conversion table's ``x floor`` and ``RSS / naive`` cells are its own rows' ratios."""
    text = BENCHMARKS.read_text(encoding="utf-8")
    (_, _, table), = [s for s in sections(text) if s[0].startswith("Checkpoint conversion")]
    rows = [r for r in table_rows("\n".join(table)) if r[0] != "converter"]
    head = table_rows("\n".join(table))
    head = next(r for r in head if r[0] == "converter")
    col = {name: i for i, name in enumerate(head)}

    def num(row, name):
        m = NUMBER.search(row[col[name]].replace("*", ""))
        return float(m.group()) if m else None

    floor = next(r for r in rows if "floor" in r[0])
    naive = next(r for r in rows if "naive" in r[0])
    ours = next(r for r in rows if "draftsmith" in r[0])
    assert num(ours, "x floor") == pytest.approx(num(ours, "wall s") / num(floor, "wall s"), abs=0.01)
    assert num(ours, "RSS / naive") == pytest.approx(num(ours, "peak RSS GiB") / num(naive, "peak RSS GiB"),
                                                     abs=0.01)


def test_no_adapter_serves_points_to_init():
    with pytest.raises(UserError) as e:
        route({"architectures": ["NoSuchDraftModel"]}, where="x/config.json")
    assert "no adapter serves" in e.value.problems[0] and "draftsmith init source=" in e.value.problems[0]
