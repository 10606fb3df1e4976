"""``draftsmith draft``: one draft step on the PyTorch reference host; with no checkpoint, on
the embedded synthetic default."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from ...convert.execute import convert
from ...convert.locate import converted_by, locate
from ...convert.synth import synthesize
from ...errors import UserError
from ...io.atomic_file import check_file_replaceable, owned_safetensors
from ...io.publish import remove_temp
from ...io.scratch import RUN_SCRATCH, make_scratch
from ...runtime.draft import format_report, report_json, run_draft
from ...runtime.memory import check_draft_memory, check_lowering
from ...runtime.target_folder import default_target, missing_target, target_folder
from ..inputs import adapter as chosen_adapter, subfolders

EXPLAIN = """
what this shows: the drafter proposes tokens for the target model to verify, one block at a
time. The anchor is the last token the target produced; the block is B positions after the
context (the anchor, then mask tokens) that the drafter fills in one forward pass, and K
(max_draft_len) is how many draft tokens that yields (B with sample_from_anchor, else B-1).
Each confidence is the drafter's estimate that its token will be accepted, so a server can
stop verifying early. Context here is random target hidden states (a smoke test, not a demo
of quality): format=json gives the same as one JSON object."""


def run(opts, spec, path) -> int:
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
        adapter = chosen_adapter(spec, path, opts)
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
        found = locate(opts["checkpoint"], subfolders(spec, opts), key="checkpoint", allow_converted=True)
        checkpoint = found.path
        if converted_by(checkpoint) is None:  # a source checkpoint: convert it first
            adapter = chosen_adapter(spec, path, opts, checkpoint)
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
