"""``draftsmith <command> key=value ...``: compose with Hydra, call one library function.

Exit codes: 0 ok; 1 ``inspect`` found an incomplete checkpoint (or ``docs check=true``
found stale docs); 2 bad input (one line per problem, no traceback).
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from ... import __version__
from ..convert.locate import converted_by, given_folder, locate, no_subfolder_hint
from ..errors import IncompleteCheckpoint, UserError
from ..io.gc_pause import paused_gc
from ..io.atomic_file import check_file_replaceable, owned_safetensors, write_file
from ..io.publish import install_signal_handlers, remove_temp
from ..io.scratch import RUN_SCRATCH, make_scratch
from ..spec.loading import adapter_files, load_spec
from ..spec.schema import is_schema_file, json_schema
from .compose import compose
from .shown import shown
from .keys import COMMANDS as KEY_TABLE, command_help, usage

#: Commands that run without the stages below (nor torch): start-up stays short.
LIGHT_COMMANDS = ("adapters", "schema", "docs")


def _import_stages() -> None:
    """Import torch and the stages the other commands call, binding the names this module's
    commands use; done once, when such a command runs (``--version``, ``help`` and
    :data:`LIGHT_COMMANDS` never pay torch's start-up)."""
    global torch, docs, compile_spec, route, ResolvedDrafter, defaulted, dump_sources, drafter_subfolder_hint
    global read_config, execute, export, Problem, format_plan_rows, synthesize, DEFAULT, default_engine
    global write_package, eval_command, format_report, report_json, run_draft
    global check_draft_memory, check_lowering, init, trtllm_warning, default_target, missing_target, target_folder
    global serving_target, convert, conversion_plan, resolve
    import torch

    from .. import docs
    from ..compile.adapter import compile_spec, route
    from ..compile.resolve import resolve
    from ..compile.resolved import ResolvedDrafter, defaulted, dump_sources
    from ..compile.trtllm_limits import trtllm_warning
    from ..convert.checkpoint import drafter_subfolder_hint, read_config
    from ..convert.execute import convert, execute
    from ..convert.export import export
    from ..convert.plan import Problem, format_report as format_plan_rows, plan as conversion_plan
    from ..convert.synth import synthesize
    from ..emit.render import DEFAULT, default_engine, write_package
    from ..emit.serving_target import serving_target
    from ..eval import command as eval_command
    from ..runtime.draft import format_report, report_json, run_draft
    from ..runtime.memory import check_draft_memory, check_lowering
    from ..runtime.target_folder import default_target, missing_target, target_folder
    from . import init


def _need(opts: dict, key: str, command: str) -> str:
    if opts.get(key) in (None, ""):
        raise UserError(f"draftsmith {command}: missing {key}=... (see `draftsmith help {command}`)")
    return str(opts[key])


def _adapter(spec, path, opts, source: Path | None = None):
    if spec is not None:
        return compile_spec(spec, path, opts.get("adapter_overrides", ()))
    if source is None:
        raise UserError("missing adapter=NAME (`draftsmith adapters` lists them)")
    raw = read_config(source)
    hint = drafter_subfolder_hint(source) or no_subfolder_hint(source, _subfolders(None, opts))
    return route(raw, opts.get("adapter_dir"), where=f"{source / 'config.json'}{hint}")


def _subfolders(spec, opts) -> list[str]:
    """Where drafters may sit under a model root: the chosen adapter's ``match.subfolders``,
    else every known adapter's."""
    if spec is not None:
        return list(spec.match.subfolders)
    out: list[str] = []
    for name in adapter_files(opts.get("adapter_dir")):
        try:
            out += load_spec(name, adapter_dir=opts.get("adapter_dir"))[0].match.subfolders
        except UserError:
            continue  # a broken adapter file is reported when it is chosen, not here
    return out


def _source(opts, spec, key: str = "source") -> Path:
    """``source=`` resolved (folder, model root's drafter subfolder, or a Hugging Face cache
    snapshot); a note on stderr says where it went."""
    found = locate(opts[key], _subfolders(spec, opts), key=key)
    if found.how:
        print(f"{key}={opts[key]}: using {found.path} ({found.how})", file=sys.stderr)
    return found.path


def cmd_synth(opts, spec, path):
    adapter = _adapter(spec, path, opts)
    out = Path(_need(opts, "out", "synth"))
    synthesize(adapter, opts["scale"], out, seed=opts["seed"], overwrite=opts["overwrite"], progress=opts["progress"],
               layout=opts.get("layout") or "spec")
    print(f"wrote synthetic {adapter.name} checkpoint ({opts['scale']}) to {out} (borrowed target tensors in {out / 'target'})")
    return 0


def describe_plan(plan) -> str:
    n_bytes = sum(m.nbytes for m in plan.outputs.values())
    r = plan.resolved
    lines = [
        f"source: {plan.source} ({len(plan.sources)} tensors)",
        f"adapter: {r.adapter}   family: {r.family}",
        f"output: {len(plan.outputs)} tensors, {n_bytes / 2**20:.1f} MiB, dtype {r.dims.dtype}, "
        f"max_draft_len {r.max_draft_len}",
    ]
    lines += [w for w in (trtllm_warning(r),) if w]
    if plan.dropped:
        lines.append(f"dropped by rename: {len(plan.dropped)}")
    if plan.ignored:
        lines.append(f"shared with target (ignored): {', '.join(plan.ignored)}")
    lines.append("layers:")
    for i, l in enumerate(r.layers):
        mask = "full" if l.mask.window is None else f"window {l.mask.window}"
        low = ", ".join(f"{k}={v}" for k, v in l.lowering.items())
        lines.append(f"  {i}: {'causal' if l.mask.causal else 'non-causal'} {mask}  [{low}]")
    lines += defaults_lines(r)
    lines.append("values (source):")
    lines += ["  " + line for line in dump_sources(r).splitlines() if not line.startswith(("layers =", "norms ="))]
    lines.append("tensors (target <- source, transforms):")
    by_out = _tensor_rows(plan)
    # compress layer ranges like the report does
    rows = [Problem(shown(o), "<-", shown(f"{', '.join(by_out[o][0])} [{by_out[o][1]}]")) for o in plan.outputs
            if o in by_out]
    lines += ["  " + r.replace(" | <- | ", " <- ", 1) for r in format_plan_rows(rows).splitlines()]
    return "\n".join(shown(line) for line in lines)  # names from the checkpoint: one line each, escaped


def problems_report(plan) -> str:
    """The loading report's problem rows, names escaped (:func:`~.shown.shown`)."""
    return format_plan_rows([Problem(shown(p.name), p.status, shown(p.detail)) for p in plan.problems])


def defaults_lines(r: ResolvedDrafter) -> list[str]:
    """The loading report's defaults block: every field that took a spec or family default."""
    rows = defaulted(r)
    return [f"defaults (not in config.json): {len(rows)}"] + ["  " + l for l in dump_sources(r, rows).splitlines()]


def defaults_json(r: ResolvedDrafter) -> list[dict]:
    """:func:`defaults_lines` as JSON-ready rows ``{field, value, source}``."""
    return [{"field": k, "value": v, "source": s} for k, v, s in defaulted(r)]


def _tensor_rows(plan) -> dict[str, tuple[list[str], str]]:
    """Output tensor -> (its source tensors, the transforms applied, or ``copy``)."""
    by_out = {}
    for g in plan.groups:
        ops = " + ".join(dict.fromkeys(a.transform.name for a in g.apps)) or "copy"
        for o in g.outputs:
            by_out[o] = (list(g.sources), ops)
    return by_out


def plan_dict(plan) -> dict:
    """The plan and loading report as JSON-ready data (``format=json``)."""
    r = plan.resolved
    rows = _tensor_rows(plan)
    return {
        "source": str(plan.source), "adapter": r.adapter, "family": r.family,
        "dtype": r.dims.dtype, "max_draft_len": r.max_draft_len,
        "layers": [{"causal": l.mask.causal, "window": l.mask.window, "lowering": dict(l.lowering)} for l in r.layers],
        "outputs": {o: {"shape": list(m.shape), "dtype": str(m.dtype).replace("torch.", ""),
                        "from": rows.get(o, ([], ""))[0], "transforms": rows.get(o, ([], ""))[1]}
                    for o, m in plan.outputs.items()},
        "defaults": defaults_json(r), "dropped": list(plan.dropped), "ignored": list(plan.ignored),
        "complete": plan.complete, "problems": plan.report().splitlines() if not plan.complete else [],
        "warnings": [w for w in (trtllm_warning(r),) if w],
    }


def cmd_inspect(opts, spec, path):
    source = _source(opts, spec)
    adapter = _adapter(spec, path, opts, source)
    with paused_gc():  # one bulk step: no cyclic GC passes over the plan's 10^5-10^6 objects
        plan = conversion_plan(adapter, source)
        if opts["format"] == "json":
            print(json.dumps(plan_dict(plan)))
            return 0 if plan.complete else 1
        print(describe_plan(plan))
        if not plan.complete:
            print(f"\nloading report: {len(plan.problems)} problem(s)")
            print(problems_report(plan))
        complete = plan.complete
        del plan  # freed by reference counting: the collection that GC resumes with stays small
    if not complete:
        return 1
    print("\nloading report: complete (every target tensor accounted for)")
    return 0


def _written(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def cmd_convert(opts, spec, path):
    quiet = opts["format"] == "json"
    say = (lambda *a: print(*a, file=sys.stderr)) if quiet else print
    if opts.get("source") in (None, ""):
        adapter = _adapter(spec, path, opts)
        out = Path(_need(opts, "out", "convert (the embedded default needs out=DIR)"))
        source = out.parent / f"{out.name}.source"
        synthesize(adapter, "tiny", source, seed=opts["seed"], overwrite=opts["overwrite"], progress=opts["progress"])
        say(f"no source= given: synthesized the embedded default, a tiny {adapter.name} checkpoint, in {source} "
            f"(its target tensors in {source / 'target'})")
    else:
        source = _source(opts, spec)
        adapter = _adapter(spec, path, opts, source)
        out = Path(_need(opts, "out", "convert"))
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


def cmd_schema(opts, spec, path):
    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if opts.get("out"):
        write_file(opts["out"], text.encode("utf-8"), key="out", command="schema", overwrite=opts["overwrite"],
                   owned=is_schema_file)
        print(f"wrote {opts['out']}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_adapters(opts, spec, path):
    """``draftsmith adapters``: name, architectures, family, file of every known adapter."""
    rows = [("name", "architectures", "family", "file")]
    for name, f in sorted(adapter_files(opts.get("adapter_dir")).items()):
        try:
            s, _ = load_spec(name, adapter_dir=opts.get("adapter_dir"))
            rows.append((name, ", ".join(s.match.architectures), s.family, str(f)))
        except UserError as e:
            rows.append((name, f"(invalid: {e.problems[0]})", "-", str(f)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
    return 0


EXPLAIN = """
what this shows: the drafter proposes tokens for the target model to verify, one block at a
time. The anchor is the last token the target produced; the block is B positions after the
context (the anchor, then mask tokens) that the drafter fills in one forward pass, and K
(max_draft_len) is how many draft tokens that yields (B with sample_from_anchor, else B-1).
Each confidence is the drafter's estimate that its token will be accepted, so a server can
stop verifying early. Context here is random target hidden states (a smoke test, not a demo
of quality): format=json gives the same as one JSON object."""


def cmd_draft(opts, spec, path):
    """One draft step; with no checkpoint, on the embedded synthetic default."""
    scratch: list[Path] = []  # checkpoints made for this step only (owned: a killed run's are tidied next run)
    try:
        return _draft(opts, spec, path, scratch)
    finally:
        for d in scratch:
            remove_temp(d)


def _draft(opts, spec, path, scratch: list[Path]):
    device = str(opts["device"])
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise UserError(f"device={device}: expected cpu, cuda or cuda:N")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={device}: CUDA is not available here (device=cpu runs anywhere)")
    if opts.get("lowering") is not None:
        check_lowering(opts["lowering"], device)
    if opts.get("checkpoint") in (None, ""):
        adapter = _adapter(spec, path, opts)
        work = make_scratch(RUN_SCRATCH)
        scratch.append(work)
        synthesize(adapter, "tiny", work / "synthetic", seed=opts["seed"], progress=opts["progress"])
        checkpoint = work / "converted"
        convert(adapter, work / "synthetic", checkpoint, progress=opts["progress"])
        target = target_folder(opts["target"]) if opts.get("target") else work / "synthetic" / "target"
        note = (f"no checkpoint= given: drafted on the embedded default (a tiny synthetic {adapter.name}, "
                "converted in a temporary folder removed afterwards)")
    else:
        note = ""
        found = locate(opts["checkpoint"], _subfolders(spec, opts), key="checkpoint", allow_converted=True)
        checkpoint = found.path
        if converted_by(checkpoint) is None:  # a source checkpoint: convert it first
            adapter = _adapter(spec, path, opts, checkpoint)
            work = make_scratch(RUN_SCRATCH)
            scratch.append(work)
            print(f"checkpoint={opts['checkpoint']}: not converted yet; converting it with {adapter.name} "
                  "into a temporary folder first", file=sys.stderr)
            convert(adapter, checkpoint, work / "converted", progress=opts["progress"])
            checkpoint = work / "converted"
        if opts.get("target"):
            target = target_folder(opts["target"])
        else:
            target = default_target(opts["checkpoint"], found.path)
            if target is None:
                raise missing_target("draft", opts["checkpoint"])
            print(f"no target= given: using {target} (the target of checkpoint={opts['checkpoint']})",
                  file=sys.stderr)
    if opts.get("dump") and os.path.lexists(opts["dump"]):  # refused before the step, checked again when written
        check_file_replaceable(Path(opts["dump"]), "dump", opts["overwrite"], "draft", owned_safetensors("draft"))
    check_draft_memory(checkpoint, device, context=opts["context"], batch=opts["batch"])
    try:
        report = run_draft(checkpoint, target, device=device, context=opts["context"],
                           seed=opts["seed"], batch=opts["batch"], lowering=opts.get("lowering"),
                           dump=opts.get("dump"), page_size=opts["page_size"], dtype=opts.get("dtype"),
                           overwrite=opts["overwrite"], selector=opts["selector"],
                           temperature=opts["temperature"])
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise UserError(f"draftsmith draft: {str(e).strip(chr(39))}") from None
    if opts["format"] == "json":
        print(report_json(report))
    else:
        print(format_report(report))
        print(EXPLAIN)
    if note:
        print(note, file=sys.stderr)
    return 0


def cmd_emit(opts, spec, path):
    """``draftsmith emit adapter=NAME target=trtllm out=DIR``: write the package, print the
    summary (``max_draft_len``, ``speculative_config``, paste rows). The adapter is compiled
    with the command line's ``adapter.*`` overrides; the package's ``resolved.json`` is the drafter
    they compile to."""
    out = Path(_need(opts, "out", "emit"))
    config = opts.get("config")
    model_text = opts.get("model")
    if config is not None and not Path(config).is_file():  # a folder, a model root or a repo id: as convert's source=
        found = locate(str(config), _subfolders(spec, opts), key="config", allow_converted=True)
        if found.how:
            print(f"config={config}: using {found.path} ({found.how})", file=sys.stderr)
        if model_text is None and found.path != given_folder(str(config), "config")[0]:
            model_text = str(config)  # a model root: the target the drafter sits in
        config = found.path
    target_architecture, model = opts.get("target_architecture"), None
    if model_text is not None:
        model, arch = serving_target(str(model_text))
        if target_architecture is None:
            target_architecture = arch
            print(f"target_architecture={arch} (model={model_text}: its config.json's architectures[0])",
                  file=sys.stderr)
        elif target_architecture != arch:
            raise UserError(f"target_architecture={target_architecture} but model={model_text}'s config.json names "
                            f"{arch!r}; drop one, or name the model the drafter is served with")
    if spec is None:  # no adapter=: the one the converted config= records
        spec, path = _recorded_adapter(config, opts)
    adapter = _adapter(spec, path, opts)
    backbone = opts.get("backbone") or DEFAULT
    backbone = None if backbone == "none" else backbone
    # overwrite= reaches atomic_dir/publish (command "emit": never a folder another command wrote)
    res = write_package(adapter, adapter.path, out, default_engine(adapter, backbone), config=config,
                        overwrite=opts["overwrite"], target_architecture=target_architecture)
    res.model = model
    print(res.summary())
    return 0


def _recorded_adapter(config, opts):
    """(spec, path) of the adapter a converted ``config=`` records (``draftsmith.adapter``); one-line
    UserError when there is no ``config=`` or it records none."""
    if config is None:
        raise UserError("emit: give adapter=NAME, or config=<a `draftsmith convert` output>, which records its adapter")
    folder = Path(config).parent if Path(config).is_file() else Path(config)
    by = converted_by(folder)
    if by is None:
        raise UserError(f"config={config}: not a `draftsmith convert` output (no draftsmith section), so it names no "
                        "adapter; convert it first, or give adapter=NAME")
    name = by.rsplit(" with ", 1)[1]
    return load_spec(name, adapter_dir=opts.get("adapter_dir"))


def cmd_eval(opts, spec, path):
    return eval_command.cli(opts, lambda source: _adapter(spec, path, opts, source), _subfolders(spec, opts))


def cmd_docs(opts, spec, path):
    from .. import docs as docs_module  # torch-free (a light command)

    return docs_module.cli(opts)


def cmd_init(opts, spec, path):
    return init.cli(opts, _subfolders(None, opts))  # a model root: its drafter subfolder, as convert


COMMANDS = {
    "synth": cmd_synth, "inspect": cmd_inspect, "convert": cmd_convert, "draft": cmd_draft,
    "eval": cmd_eval, "emit": cmd_emit, "docs": cmd_docs, "init": cmd_init, "schema": cmd_schema,
    "adapters": cmd_adapters,
}


def set_threads(threads) -> None:
    """``threads=N``: torch intra-op threads (outputs are bit-identical for any N), at most
    the CPUs this process may run on (a huge pool crashes the OpenMP runtime)."""
    if threads is not None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if threads > cpus:
            raise UserError(f"threads={threads}: more than the {cpus} CPU(s) this process may use")
        torch.set_num_threads(threads)


def _help(argv: list[str]) -> int | None:
    """``help``, ``-h``, ``--help``, ``--version``, ``COMMAND --help``: print and return the
    exit code; None when ``argv`` asks for none of them."""
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    first = argv[0]
    if first == "--version":
        print(f"draftsmith {__version__}")
        return 0
    if first in ("-h", "--help", "help"):
        if len(argv) > 1 and first == "help" and argv[1] not in ("-h", "--help"):
            if argv[1] not in KEY_TABLE:
                return _unknown_command(argv[1])
            print(command_help(argv[1]))
        else:
            print(usage())
        return 0
    if first in KEY_TABLE and any(a in ("-h", "--help") for a in argv[1:]):
        print(command_help(first))
        return 0
    return None


def _unknown_command(command: str) -> int:
    close = difflib.get_close_matches(command, KEY_TABLE, n=1)
    print(f"error: unknown command {command!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
          + f"; commands: {', '.join(KEY_TABLE)} (`draftsmith help`)", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """The ``draftsmith`` entry point; output piped into a reader that stops early (``| head``)
    ends quietly instead of with a BrokenPipeError traceback."""
    try:
        return _main(argv)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's exit flush must not raise again
        return 0


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    code = _help(argv)
    if code is not None:
        return code
    command, args = argv[0], argv[1:]
    if command not in COMMANDS:
        return _unknown_command(command)
    install_signal_handlers()  # SIGTERM/SIGHUP clean up like Ctrl-C
    for stream in (sys.stdout, sys.stderr):  # a lone surrogate that still reaches a print is escaped, not a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        opts, spec, path = compose(command, args)
        if command not in LIGHT_COMMANDS or opts.get("threads") is not None:
            _import_stages()
        set_threads(opts.get("threads"))
        return COMMANDS[command](opts, spec, path) or 0
    except IncompleteCheckpoint as e:
        for p in e.problems:
            print(shown(p))
        return 1
    except UserError as e:
        for p in e.problems:  # one line per problem, always: names from files are escaped
            print(f"error: {shown(p)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"interrupted{f' ({e})' if str(e) else ''}", file=sys.stderr)
        return getattr(e, "exit_code", 130)
    except BrokenPipeError:  # the reader of our output stopped early: main() ends quietly
        raise
    except OSError as e:  # the environment refused: read-only or missing parent, disk full, ulimit -f
        where = e.filename or "draftsmith"
        print(f"error: {shown(where)}: {shown(e.strerror or e)}", file=sys.stderr)
        return 2
    except RecursionError:
        print("error: input nested too deeply", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
