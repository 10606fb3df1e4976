"""``draftsmith init``: infer a starter adapter spec from an unknown checkpoint."""

from __future__ import annotations

from .. import init
from ..inputs import subfolders


def run(opts, spec, path) -> int:
    return init.cli(opts, subfolders(None, opts))  # a model root: its drafter subfolder, as convert
