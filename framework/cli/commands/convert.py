"""``draftsmith convert``: convert a drafter checkpoint to draftsmith's format or export it to
another (no ``source=``: the embedded tiny synthetic default)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ...compile.trtllm_limits import trtllm_warning
from ...compile.resolve import resolve
from ...convert.checkpoint import read_config
from ...convert.execute import execute
from ...convert.plan import plan as conversion_plan
from ...convert.export import export
from ...convert.synth import synthesize
from ...io.gc_pause import paused_gc
from ..inputs import adapter as chosen_adapter, need, source as chosen_source
from ...convert.report import defaults_json, defaults_lines, plan_dict


def _written(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def run(opts, spec, path) -> int:
    quiet = opts["format"] == "json"
    say = (lambda *a: print(*a, file=sys.stderr)) if quiet else print
    if opts.get("source") in (None, ""):
        adapter = chosen_adapter(spec, path, opts)
        out = Path(need(opts, "out", "convert (the embedded default needs out=DIR)"))
        source = out.parent / f"{out.name}.source"
        synthesize(adapter, "tiny", source, seed=opts["seed"], overwrite=opts["overwrite"], progress=opts["progress"])
        say(f"no source= given: synthesized the embedded default, a tiny {adapter.name} checkpoint, in {source} "
            f"(its target tensors in {source / 'target'})")
    else:
        source = chosen_source(opts, spec)
        adapter = chosen_adapter(spec, path, opts, source)
        out = Path(need(opts, "out", "convert"))
    record = resolve(adapter, read_config(source))
    warning = trtllm_warning(record)
    if warning:
        say(warning)
    if opts["to"] != "dflash":
        export(adapter, source, out, opts["to"], overwrite=opts["overwrite"], adapter_dir=opts.get("adapter_dir"),
               progress=opts["progress"], verifier=opts.get("verifier"))
        r = record  # the source's defaults (the export wrote them into the target format's config)
        if quiet:
            print(json.dumps({"source": str(source), "adapter": adapter.name, "to": opts["to"], "out": str(out),
                              "defaults": defaults_json(r), "files": _written(out)}))
        else:
            print(f"wrote {opts['to']} checkpoint to {out}")
            print("\n".join(defaults_lines(r)))
        return 0
    with paused_gc():  # one bulk step: no cyclic GC passes over the plan's 10^5-10^6 objects
        plan = conversion_plan(adapter, source)
        execute(plan, out, overwrite=opts["overwrite"], progress=opts["progress"])
        if quiet:
            print(json.dumps({**plan_dict(plan), "out": str(out), "files": _written(out)}))
        else:
            print(f"converted {source} with adapter {adapter.name}: {len(plan.outputs)} tensors -> {out}")
            print("\n".join(defaults_lines(plan.resolved)))
        del plan  # freed by reference counting: the collection that GC resumes with stays small
    return 0
