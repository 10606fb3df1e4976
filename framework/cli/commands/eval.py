"""``draftsmith eval``: acceptance length of greedy speculative decoding with a real target
model (docs/eval.md)."""

from __future__ import annotations

from ...eval import command
from ..inputs import adapter as chosen_adapter, subfolders


def run(opts, spec, path) -> int:
    return command.cli(opts, lambda source: chosen_adapter(spec, path, opts, source), subfolders(spec, opts))
