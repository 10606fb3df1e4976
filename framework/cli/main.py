"""``draftsmith <command> key=value ...``: compose with Hydra, call one library function.

Exit codes: 0 ok; 1 ``inspect`` found an incomplete checkpoint (or ``docs check=true``
found stale docs); 2 bad input (one line per problem, no traceback).
"""

from __future__ import annotations

import difflib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from .. import docs
from ..compile.engine import compile_spec, route
from ..compile.resolved import ResolvedDrafter, dump_sources
from ..convert.checkpoint import drafter_subfolder_hint, read_config
from ..convert.execute import execute
from ..convert.export import export
from ..convert.plan import Problem, format_report as format_plan_rows
from ..convert.synth import synthesize
from ..emit.render import DEFAULT, default_engine, spec_overrides, write_package
from ..errors import IncompleteCheckpoint, UserError
from ..runtime.draft import format_report, report_json, run_draft
from ..spec.schema import json_schema
from . import init
from .compose import compose

USAGE = """usage: draftsmith <command> key=value ...

commands:
  synth    adapter=NAME scale=tiny|full out=DIR seed=N [layout=transformers4|transformers5|speculators]
                                                            write a synthetic source checkpoint
  inspect  [adapter=NAME] source=DIR                        plan + loading report (exit 1 if incomplete)
  convert  [adapter=NAME] [source=DIR] [out=DIR] [to=FORMAT verifier=MODEL]
                                                            convert (no source: the embedded default);
                                                            to=: export in another format
  draft    adapter=NAME [checkpoint=DIR target=DIR] device=cpu|cuda context=N seed=S [format=json] [dump=FILE]
           [dtype=float32|bfloat16|float16]                 (default: the checkpoint's dtype)
  emit     adapter=NAME target=trtllm out=DIR               generate the TensorRT-LLM plugin module
  docs     [check=true] [out=DIR] [adapter_dir=DIR]         regenerate (or check) docs from the adapters
  init     source=DIR out=FILE                              infer a starter adapter spec
  schema   out=FILE                                         export the adapter spec's JSON Schema

overrides: adapter.attention.window=2048, adapter_dir=DIR, overwrite=true, ...
"""


def _need(opts: dict, key: str, command: str) -> str:
    if opts.get(key) in (None, ""):
        raise UserError(f"draftsmith {command}: missing {key}=...")
    return str(opts[key])


def _adapter(spec, path, opts, source: Path | None = None):
    if spec is not None:
        return compile_spec(spec, path)
    if source is None:
        raise UserError("missing adapter=NAME")
    raw = read_config(source)
    return route(raw, opts.get("adapter_dir"), where=f"{source / 'config.json'}{drafter_subfolder_hint(source)}")


def cmd_synth(opts, spec, path):
    adapter = _adapter(spec, path, opts)
    out = Path(_need(opts, "out", "synth"))
    synthesize(adapter, opts["scale"], out, seed=opts["seed"], overwrite=opts["overwrite"], progress=True,
               layout=opts.get("layout") or "spec")
    print(f"wrote synthetic {adapter.name} checkpoint ({opts['scale']}) to {out} (borrowed target tensors in {out / 'target'})")
    return 0


def describe_plan(plan) -> str:
    n_bytes = sum(m.nbytes for m in plan.outputs.values())
    r = ResolvedDrafter.from_config(plan.config)
    lines = [
        f"source: {plan.source} ({len(plan.sources)} tensors)",
        f"adapter: {r.adapter}   family: {r.family}",
        f"output: {len(plan.outputs)} tensors, {n_bytes / 2**20:.1f} MiB, dtype {r.dims.dtype}, "
        f"max_draft_len {r.max_draft_len}",
    ]
    if plan.dropped:
        lines.append(f"dropped by rename: {len(plan.dropped)}")
    if plan.ignored:
        lines.append(f"shared with target (ignored): {', '.join(plan.ignored)}")
    lines.append("layers:")
    for i, l in enumerate(r.layers):
        mask = "full" if l.mask.window is None else f"window {l.mask.window}"
        low = ", ".join(f"{k}={v}" for k, v in l.lowering.items())
        lines.append(f"  {i}: {'causal' if l.mask.causal else 'non-causal'} {mask}  [{low}]")
    defaulted = {k: v for k, v in r.sources.items() if "default" in v and not v.startswith("config.json")}
    lines.append(f"defaults (not in config.json): {len(defaulted)}")
    lines += ["  " + line for line in dump_sources(r).splitlines() if line.split(" =", 1)[0] in defaulted]
    lines.append("values (source):")
    lines += ["  " + line for line in dump_sources(r).splitlines() if not line.startswith(("layers =", "norms ="))]
    lines.append("tensors (target <- source, transforms):")
    by_out = {}
    for g in plan.groups:
        ops = " + ".join(dict.fromkeys(a.transform.name for a in g.apps)) or "copy"
        for o in g.outputs:
            by_out[o] = f"{o} <- {', '.join(g.sources)} [{ops}]"
    # compress layer ranges like the report does
    rows = [Problem(o, "<-", by_out[o].split(" <- ", 1)[1]) for o in plan.outputs if o in by_out]
    lines += ["  " + r.replace(" | <- | ", " <- ", 1) for r in format_plan_rows(rows).splitlines()]
    return "\n".join(lines)


def cmd_inspect(opts, spec, path):
    source = Path(_need(opts, "source", "inspect"))
    adapter = _adapter(spec, path, opts, source)
    plan = adapter.plan(source)
    print(describe_plan(plan))
    if not plan.complete:
        print(f"\nloading report: {len(plan.problems)} problem(s)")
        print(plan.report())
        return 1
    print("\nloading report: complete (every target tensor accounted for)")
    return 0


def cmd_convert(opts, spec, path):
    if opts.get("source") in (None, ""):
        adapter = _adapter(spec, path, opts)
        work = Path(tempfile.mkdtemp(prefix=f"draftsmith-{adapter.name}-"))
        source = work / "synthetic"
        synthesize(adapter, "tiny", source, seed=opts["seed"])
        print(f"no source given: synthesized a tiny {adapter.name} checkpoint in {source}")
        out = Path(opts["out"]) if opts.get("out") else work / "converted"
    else:
        source = Path(opts["source"])
        adapter = _adapter(spec, path, opts, source)
        out = Path(_need(opts, "out", "convert"))
    if opts.get("to", "dflash") not in ("dflash",):
        export(adapter, source, out, opts["to"], overwrite=opts["overwrite"], adapter_dir=opts.get("adapter_dir"),
               verifier=opts.get("verifier"))
        print(f"wrote {opts['to']} checkpoint to {out}")
        return 0
    plan = adapter.plan(source)
    execute(plan, out, overwrite=opts["overwrite"], progress=True)
    print(f"converted {source} with adapter {adapter.name}: {len(plan.outputs)} tensors -> {out}")
    return 0


def cmd_schema(opts, spec, path):
    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if opts.get("out"):
        Path(opts["out"]).write_text(text)
        print(f"wrote {opts['out']}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_draft(opts, spec, path):
    """One draft step; with no checkpoint, on the embedded synthetic default."""
    scratch: list[Path] = []  # checkpoints made for this step only
    try:
        return _draft(opts, spec, path, scratch)
    finally:
        for d in scratch:
            shutil.rmtree(d, ignore_errors=True)


def _draft(opts, spec, path, scratch: list[Path]):
    if opts.get("checkpoint") in (None, ""):
        adapter = _adapter(spec, path, opts)
        work = Path(tempfile.mkdtemp(prefix=f"draftsmith-{adapter.name}-"))
        scratch.append(work)
        synthesize(adapter, "tiny", work / "synthetic", seed=opts["seed"])
        checkpoint = work / "converted"
        execute(adapter.plan(work / "synthetic"), checkpoint, progress=False)
        target = Path(opts["target"]) if opts.get("target") else work / "synthetic" / "target"
    else:
        checkpoint = Path(opts["checkpoint"])
        if "draftsmith" not in read_config(checkpoint):  # a source checkpoint: convert it first
            adapter = _adapter(spec, path, opts, checkpoint)
            work = Path(tempfile.mkdtemp(prefix=f"draftsmith-{adapter.name}-"))
            scratch.append(work)
            execute(adapter.plan(checkpoint), work / "converted", progress=False)
            checkpoint = work / "converted"
        target = Path(opts["target"]) if opts.get("target") else None
        if target is None:
            guess = Path(opts["checkpoint"]) / "target"
            if not guess.is_dir():
                raise UserError("draftsmith draft: missing target=DIR (the target's embed_tokens/lm_head)")
            target = guess
    if opts["device"] not in ("cpu", "cuda") and not str(opts["device"]).startswith("cuda:"):
        raise UserError(f"device={opts['device']}: expected cpu or cuda")
    if str(opts["device"]).startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"device={opts['device']}: CUDA is not available here")
    if opts.get("dtype") not in (None, "", "float32", "bfloat16", "float16"):
        raise UserError(f"dtype={opts['dtype']}: expected float32, bfloat16 or float16")
    try:
        report = run_draft(checkpoint, target, device=opts["device"], context=int(opts["context"]),
                           seed=int(opts["seed"]), batch=int(opts["batch"]), lowering=opts.get("lowering"),
                           dump=opts.get("dump"), page_size=int(opts["page_size"]), dtype=opts.get("dtype") or None)
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise UserError(f"draftsmith draft: {e}") from None
    print(report_json(report) if opts["format"] == "json" else format_report(report))
    return 0


def cmd_emit(opts, spec, path):
    """``draftsmith emit adapter=NAME target=trtllm out=DIR``: write the package, print the
    summary (``max_draft_len``, ``speculative_config``, paste rows). The adapter is compiled
    with the command line's ``adapter.*`` overrides, which the module records."""
    adapter = _adapter(spec, path, opts)
    target = opts.get("target") or "trtllm"
    if target != "trtllm":
        raise UserError(f"draftsmith emit: target={target}: unknown; known: trtllm")
    out = Path(_need(opts, "out", "emit"))
    res = write_package(adapter, adapter.path, out, default_engine(adapter, DEFAULT),
                        overrides=spec_overrides(adapter, opts.get("adapter_dir")))
    print(res.summary())
    return 0


def cmd_docs(opts, spec, path):
    return docs.cli(opts)


def cmd_init(opts, spec, path):
    return init.cli(opts)


COMMANDS = {
    "synth": cmd_synth, "inspect": cmd_inspect, "convert": cmd_convert, "draft": cmd_draft,
    "emit": cmd_emit, "docs": cmd_docs, "init": cmd_init, "schema": cmd_schema,
}


def set_threads(threads) -> None:
    """``threads=N``: torch intra-op threads (outputs are bit-identical for any N)."""
    if threads in (None, ""):
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise UserError(f"threads={threads}: expected a positive integer")
    torch.set_num_threads(threads)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    command, args = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        print(f"error: unknown command {command!r}" + (f" (did you mean {close[0]!r}?)" if close else ""), file=sys.stderr)
        print(USAGE, file=sys.stderr)
        return 2
    try:
        opts, spec, path = compose(args)
        set_threads(opts.get("threads"))
        return COMMANDS[command](opts, spec, path) or 0
    except IncompleteCheckpoint as e:
        for p in e.problems:
            print(p)
        return 1
    except UserError as e:
        for p in e.problems:
            print(f"error: {p}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
