"""``draftsmith eval target=... checkpoint=... prompts=...``: the command around :func:`run_eval`.

A ``checkpoint`` whose ``config.json`` has no ``draftsmith`` section is a source checkpoint:
it is converted first (``adapter=NAME`` and ``adapter.*`` overrides apply, e.g.
``adapter.attention.windowed_causal=true``) into a temporary folder removed afterwards.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from ..convert.checkpoint import read_config
from ..convert.execute import convert
from ..convert.locate import locate
from ..errors import UserError
from ..io.publish import remove_temp
from ..io.scratch import RUN_SCRATCH, make_scratch
from ..runtime.target_folder import default_target, missing_target, target_folder
from .loop import run_eval
from ..io.atomic_file import check_file_replaceable
from .report import format_report, plot_acceptance, plot_owned, report_json, require_matplotlib


def _device(name: str) -> str:
    name = str(name)
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise UserError(f"device={name}: expected cpu or cuda")
    if name.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"device={name}: CUDA is not available here")
    return name


def _positive_int(opts: dict, key: str) -> int:
    v = opts.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise UserError(f"{key}={v}: expected a positive integer")
    return v


def cli(opts: dict, adapter_for: Callable[[Path], object], subfolders=()) -> int:
    """Run ``eval`` from composed options; ``adapter_for(source_dir)`` compiles the adapter that
    converts a source checkpoint (the CLI's own routing: ``adapter=`` or the config's match);
    ``subfolders``: where drafters sit under a model root. ``checkpoint=`` and ``target=`` are
    resolved as ``draft`` resolves them (runtime/target_folder.py)."""
    for key in ("checkpoint", "prompts"):
        if opts.get(key) in (None, ""):
            raise UserError(f"draftsmith eval: missing {key}=...")
    if opts.get("format", "table") not in ("table", "json"):
        raise UserError(f"format={opts['format']}: expected table or json")
    device = _device(opts["device"])
    max_new = _positive_int(opts, "max_new_tokens")
    found = locate(str(opts["checkpoint"]), subfolders, key="checkpoint", allow_converted=True)
    checkpoint = found.path
    if opts.get("target") not in (None, ""):
        target = target_folder(opts["target"])
    else:
        target = default_target(opts["checkpoint"], checkpoint)
        if target is None:
            raise missing_target("eval", opts["checkpoint"])
        print(f"no target= given: using {target} (the target of checkpoint={opts['checkpoint']})", file=sys.stderr)
    if opts.get("plot"):
        require_matplotlib(opts["plot"])  # fail before the run, not after it
        if os.path.lexists(opts["plot"]):
            check_file_replaceable(Path(opts["plot"]), "plot", bool(opts.get("overwrite")), "eval", plot_owned)
    scratch = None
    try:

        if "draftsmith" not in read_config(checkpoint):  # a source checkpoint: convert it first
            adapter = adapter_for(checkpoint)
            scratch = make_scratch(RUN_SCRATCH)  # owned: a killed run's is tidied by the next
            convert(adapter, checkpoint, scratch / "converted", progress=False)
            checkpoint = scratch / "converted"
        report = run_eval(target, checkpoint, opts["prompts"], max_new_tokens=max_new, device=device,
                          dtype=opts.get("dtype"), lowering=opts.get("lowering"), check=bool(opts.get("check")),
                          selector=bool(opts.get("selector", True)))
    finally:
        if scratch is not None:
            remove_temp(scratch)
    report.checkpoint = str(opts["checkpoint"])  # the user's folder, also when converted on the way
    if opts.get("plot"):
        plot_acceptance(report, opts["plot"], overwrite=bool(opts.get("overwrite")))
    print(report_json(report) if opts.get("format") == "json" else format_report(report))
    if opts.get("check") and report.matches is False:
        print("error: speculative output differs from the target's greedy output", flush=True)
        return 1
    return 0
