"""``draftsmith docs``: regenerate (or check) the generated docs; torch-free. It lives in the docs
stage (the last one), which the command line names in its table but never imports."""

from __future__ import annotations

from . import cli as docs_cli


def run(opts, spec, path) -> int:
    return docs_cli(opts)
