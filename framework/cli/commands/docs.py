"""``draftsmith docs``: regenerate (or check) the generated docs; torch-free."""

from __future__ import annotations

from ... import docs


def run(opts, spec, path) -> int:
    return docs.cli(opts)
