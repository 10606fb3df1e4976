"""Executing a plan: stream source tensors group by group, write sharded safetensors,
the index and the flattened config into a temp dir, then rename it into place.

Peak memory is bounded by the largest group (the sources one output needs), not the
checkpoint. On any failure nothing exists at the destination.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from ...transforms.base import Context, TransformError

from ..errors import UserError
from ..io.gc_pause import paused_gc
from ..io import host_memory
from ..io.host_memory import gib
from ..io.publish import atomic_dir, publish, remove_temp, step_point
from .batch import convert_window, finite, windows
from .checkpoint import TensorReader
from .plan import Group, Plan, plan as conversion_plan
from .writer import ShardWriter, WriteQueue, shard_layout, shard_names

if TYPE_CHECKING:
    import torch

    from ..compile.adapter import Adapter


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
        if t.is_floating_point() and not finite(t):
            srcs = ", ".join(group.sources)
            raise UserError(f"{name}: NaN or Inf after conversion (from {srcs} in {plan.sources[group.sources[0]].file})"
                            if plan.source else f"{name}: NaN or Inf after conversion")
    return {n: tensors[n] for n in group.outputs}


#: output groups the write queue may hold while the next group converts (``WriteQueue(depth=2)``)
QUEUED_GROUPS = 2


def peak_bytes(plan: Plan) -> tuple[int, Group | None]:
    """What converting ``plan`` holds in memory at once, at least (bytes), and the group that sets
    it: one group's sources (read whole, each into memory of its own) and outputs, plus
    :data:`QUEUED_GROUPS` of the largest output groups waiting to be written."""
    def outs(g: Group) -> int:
        return sum(plan.outputs[n].nbytes for n in g.outputs)

    biggest = max(plan.groups, key=lambda g: g.nbytes + outs(g), default=None)
    if biggest is None:
        return 0, None
    queued = QUEUED_GROUPS * max(outs(g) for g in plan.groups)
    return biggest.nbytes + outs(biggest) + queued, biggest


def check_plan_fits(plan: Plan, out: Path) -> None:
    """Refuse, before anything is allocated or written, a plan whose largest group does not fit
    in the machine's available memory (:func:`peak_bytes` against ``MemAvailable``), naming its
    largest tensor and shard, or whose output does not fit on the destination's file system (the
    planned shard bytes against its free space)."""
    need, group = peak_bytes(plan)
    have = host_memory.available_bytes()
    if group is not None and have is not None and need > have:
        sized = [s for s in group.sources if s in plan.sources]
        big = max(sized, key=lambda s: plan.sources[s].meta.nbytes) if sized else group.outputs[0]
        st = plan.sources.get(big)
        where = f"{st.file}: tensor {big} ({st.meta}, {gib(st.meta.nbytes)})" if st else f"tensor {big}"
        raise UserError(f"{where}: converting it needs about {gib(need)} of memory, more than the {gib(have)} "
                        "available (MemAvailable); refused before reading it")
    total = sum(m.nbytes for m in plan.outputs.values())
    try:
        free = shutil.disk_usage(out.parent if str(out.parent) else Path(".")).free
    except OSError:
        return  # a missing parent folder is refused by the writer, naming out=
    if total > free:
        raise UserError(f"out={out}: the converted shards hold {gib(total)}, more than the {gib(free)} free on its "
                        "file system; refused before writing")


def execute(plan: Plan, out: Path, overwrite: bool = False, progress: bool = True) -> Path:
    """Write the converted checkpoint of a complete plan to ``out`` (atomically)."""
    import torch

    if not plan.complete:
        raise UserError(*plan.problem_lines())
    out = Path(out)
    check_plan_fits(plan, out)
    protect = [plan.source] if plan.source else []
    tmp = atomic_dir(out, overwrite, "convert", protect)
    threads = torch.get_num_threads()
    # Python threads instead of OpenMP: a chunk pool (one single-threaded torch op each)
    # shares the cores with the writer thread, where OpenMP workers would spin and stall.
    torch.set_num_threads(1)
    try:
        # no cyclic GC passes over the plan's objects while 10^5 tensors' small objects come
        # and go (tensors and buffers are freed by reference counting)
        with paused_gc(), ThreadPoolExecutor(max_workers=threads, thread_name_prefix="draftsmith-chunk") as pool:
            _write(plan, tmp, progress, pool)
        publish(tmp, out, overwrite, protect)
    except BaseException:
        remove_temp(tmp)
        raise
    finally:
        torch.set_num_threads(threads)
    return out


def _write(plan: Plan, tmp: Path, progress: bool, pool=None) -> None:
    import torch

    ctx = Context(plan.config, pool)
    shards = shard_layout(plan.outputs, plan.max_shard_bytes)
    names = shard_names(len(shards))
    meta = {"format": "pt", "draftsmith_adapter": plan.resolved.adapter}
    total = sum(m.nbytes for m in plan.outputs.values())
    writers = [ShardWriter(tmp / n, s, meta) for n, s in zip(names, shards)]
    where = {t: w for w in writers for t in w.metas}

    reader = TensorReader()  # one open file per shard; reads by offset, nothing mapped

    def source(name: str) -> torch.Tensor:
        """Read one source tensor into memory of its own (``pread`` at its header offset:
        no mapped pages pile up in RSS across the checkpoint)."""
        return reader.read(plan.sources[name])

    bar = tqdm(total=total, unit="B", unit_scale=True, desc="convert", disable=None if progress else True, leave=False)
    done = 0
    order = {n: i for i, n in enumerate(plan.outputs)}
    queue = WriteQueue(depth=2, after_write=step_point)  # file writes overlap conversion

    def one_by_one(g: Group) -> None:
        outs = run_group(plan, g, {s: source(s) for s in g.sources}, ctx)
        for name, t in outs.items():
            queue.put(where[name], name, t)

    def advance(groups: list[Group]) -> None:
        nonlocal done
        bar.update(sum(plan.outputs[n].nbytes for g in groups for n in g.outputs))
        done += sum(len(g.outputs) for g in groups)
        if not bar.disable:
            bar.set_postfix(tensors=f"{done}/{len(plan.outputs)}", refresh=False)

    try:
        # runs of small groups convert stacked (framework/convert/batch.py), others alone
        for window, big in windows(plan, sorted(plan.groups, key=lambda g: order[g.outputs[0]])):
            if window:
                convert_window(plan, window, reader, ctx, where, one_by_one, step_point)
                advance([g for g, _ in window])
            if big is not None:
                one_by_one(big)
                advance([big])
    except BaseException:
        queue.close(check=False)  # drain first: the original error is the one to report
        for w in writers:
            w.abort()
        raise
    finally:
        reader.close()
    queue.close()
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
    step_point()


def convert(adapter: Adapter, source: Path, out: Path, overwrite: bool = False, progress: bool = True) -> Path:
    """Convert checkpoint folder ``source`` with ``adapter`` into ``out`` (atomically): its
    :func:`~.plan.plan`, executed (:func:`execute`). Returns ``out``."""
    return execute(conversion_plan(adapter, source), out, overwrite=overwrite, progress=progress)
