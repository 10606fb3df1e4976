"""``draftsmith synth``: write a synthetic source-format checkpoint (and its borrowed target
tensors in ``out/target``)."""

from __future__ import annotations

from pathlib import Path

from ...convert.synth import synthesize
from ..inputs import adapter as chosen_adapter, need


def run(opts, spec, path) -> int:
    adapter = chosen_adapter(spec, path, opts)
    out = Path(need(opts, "out", "synth"))
    synthesize(adapter, opts["scale"], out, seed=opts["seed"], overwrite=opts["overwrite"], progress=opts["progress"],
               layout=opts.get("layout") or "spec")
    print(f"wrote synthetic {adapter.name} checkpoint ({opts['scale']}) to {out} (borrowed target tensors in {out / 'target'})")
    return 0
