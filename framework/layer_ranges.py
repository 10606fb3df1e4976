"""Layer indices written as ranges: the one rule for every text that names layer runs
(the conversion report's ``layers.{0..4}``, the docs' ``layers 0-2, 5``, the emitted
package's per-layer header ``0-2``)."""

from __future__ import annotations

from typing import Iterable


def runs(indices: Iterable[int]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive indices, ``(first, last)``, of the sorted distinct ``indices``."""
    out: list[tuple[int, int]] = []
    for i in sorted(set(indices)):
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def format_ranges(indices: Iterable[int], sep: str = ", ", dash: str = "-") -> str:
    """``0-2, 5`` (``sep``/``dash`` as given: the report writes ``0..2,5``); a single index as itself."""
    return sep.join(f"{a}" if a == b else f"{a}{dash}{b}" for a, b in runs(indices))
