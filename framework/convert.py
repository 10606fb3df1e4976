"""Executing a plan: stream source tensors group by group, write sharded safetensors,
the index and the flattened config into a temp dir, then rename it into place.

Peak memory is bounded by the largest group (the sources one output needs), not the
checkpoint. On any failure nothing exists at the destination.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import safe_open
from tqdm import tqdm

from draftsmith.transforms.base import Context, TransformError

from .errors import UserError
from .plan import Group, Plan
from .st_writer import ShardWriter, shard_layout, shard_names


def run_group(plan: Plan, group: Group, source_tensors: dict[str, torch.Tensor], ctx: Context) -> dict[str, torch.Tensor]:
    """Apply a group's transform applications to its (source-named) tensors."""
    tensors = {plan.renamed[s]: t for s, t in source_tensors.items() if s in plan.renamed}
    for app in group.apps:
        inputs = {role: tensors.pop(name) for role, name in app.binding.inputs.items()}
        try:
            tensors.update(app.transform.forward(app.binding, inputs, ctx))
        except TransformError as e:
            files = sorted({str(plan.sources[s].file) for s in app.sources}) if plan.source else ["<memory>"]
            raise UserError(f"{', '.join(files)}: {e} (source tensors {', '.join(sorted(app.sources))})") from None
    for name in group.outputs:
        t = tensors[name]
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            srcs = ", ".join(group.sources)
            raise UserError(f"{name}: NaN or Inf after conversion (from {srcs} in {plan.sources[group.sources[0]].file})"
                            if plan.source else f"{name}: NaN or Inf after conversion")
    return {n: tensors[n] for n in group.outputs}


def atomic_dir(out: Path, overwrite: bool):
    """A temp dir beside ``out``; :func:`publish` renames it into place."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise UserError(f"out={out}: already exists (pass overwrite=true to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(out)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))


def clean_stale_temps(out: Path) -> None:
    """Remove temp dirs that an earlier, killed run left beside ``out``."""
    for p in out.parent.glob(f".{out.name}.tmp-*"):
        pid = p.name[len(f".{out.name}.tmp-"):].split("-")[0]
        if not (pid.isdigit() and _alive(int(pid))):
            shutil.rmtree(p, ignore_errors=True)
    for p in out.parent.glob(f".{out.name}.old-*"):
        shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def publish(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished ``tmp`` to ``out``; an old ``out`` is removed only after that."""
    for f in sorted(tmp.rglob("*")):
        if not f.is_file():
            continue
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    old = None
    if out.exists():
        if not overwrite:
            raise UserError(f"out={out}: already exists (pass overwrite=true to replace it)")
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.rename(out, old)
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def execute(plan: Plan, out: Path, overwrite: bool = False, progress: bool = True) -> Path:
    """Write the converted checkpoint of a complete plan to ``out`` (atomically)."""
    if not plan.complete:
        raise UserError(*plan.problem_lines())
    out = Path(out)
    tmp = atomic_dir(out, overwrite)
    try:
        _write(plan, tmp, progress)
        publish(tmp, out, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _write(plan: Plan, tmp: Path, progress: bool) -> None:
    ctx = Context(plan.config)
    shards = shard_layout(plan.outputs, plan.max_shard_bytes)
    names = shard_names(len(shards))
    meta = {"format": "pt", "draftsmith_adapter": plan.config["draftsmith"]["adapter"]}
    total = sum(m.nbytes for m in plan.outputs.values())
    with ExitStack() as stack:
        writers = [ShardWriter(tmp / n, s, meta) for n, s in zip(names, shards)]
        where = {t: w for w in writers for t in w.metas}
        handles: dict[Path, object] = {}

        def source(name: str) -> torch.Tensor:
            st = plan.sources[name]
            try:
                if st.file not in handles:
                    handles[st.file] = stack.enter_context(safe_open(str(st.file), framework="pt"))
                return handles[st.file].get_tensor(name)
            except Exception as e:  # safetensors raises its own error types on bad data
                raise UserError(f"{st.file}: tensor {name}: cannot be read ({e})") from None

        bar = tqdm(total=total, unit="B", unit_scale=True, desc="convert", disable=None if progress else True, leave=False)
        done = 0
        for g in sorted(plan.groups, key=lambda g: list(plan.outputs).index(g.outputs[0])):
            outs = run_group(plan, g, {s: source(s) for s in g.sources}, ctx)
            for name, t in outs.items():
                where[name].write(name, t)
                bar.update(plan.outputs[name].nbytes)
                done += 1
            bar.set_postfix(tensors=f"{done}/{len(plan.outputs)}")
            del outs
        bar.close()
        for w in writers:
            w.close()
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": total},
            "weight_map": {t: n for n, s in zip(names, shards) for t in s},
        }
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    (tmp / "config.json").write_text(json.dumps(plan.config, indent=2) + "\n")
