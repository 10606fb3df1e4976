"""Converting many small groups at once: groups whose transform chains are elementwise and
whose sources have equal shapes and dtypes run as one stack, instead of ~10 torch
operations and two system calls per tensor. A window of consecutive small groups reads
its sources' byte span in one call, runs one transform call and one finiteness check per
stack, and writes each run of adjacent outputs in one call.

Bit-identical to converting each group alone: an elementwise transform applied to inputs
stacked along a new leading dim returns the stack of its outputs
(:attr:`Transform.elementwise`). A stack that fails (a transform refuses, or an output is
not finite) is redone group by group, so the error is the one of the first failing group
in output order, word for word.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from ...transforms.base import Context, TransformError

from ..errors import UserError
from .checkpoint import SourceTensor, TensorReader
from .plan import Group, Plan
from .writer import ShardWriter

if TYPE_CHECKING:
    import numpy as np
    import torch

#: groups whose sources hold at most this many bytes are stacked (per-call overhead dominates)
SMALL_GROUP_BYTES = 1 << 16
#: source bytes of the groups collected into one window (bounds the memory of stacks)
WINDOW_BYTES = 16 << 20


def stack_key(plan: Plan, g: Group) -> tuple | None:
    """What groups must share to run as one stack: source shapes and dtypes, and the chain
    of transforms with its inputs and outputs numbered within the group; None when the group
    cannot be stacked (a transform that is not elementwise, an empty tensor, or too big)."""
    if g.nbytes > SMALL_GROUP_BYTES or not all(a.transform.elementwise for a in g.apps):
        return None
    metas = tuple(plan.sources[s].meta for s in g.sources)
    if any(m.nbytes == 0 for m in metas):
        return None
    local = {plan.renamed[s]: i for i, s in enumerate(g.sources)}
    chain = []
    for a in g.apps:
        ins = tuple((role, local[n]) for role, n in a.binding.inputs.items())
        for o in a.binding.outputs:
            local[o] = len(local)
        chain.append((id(a.transform), ins))
    return metas, tuple(chain), tuple(local[o] for o in g.outputs)


def windows(plan: Plan, groups: Iterable[Group]) -> Iterable[tuple[list[tuple[Group, tuple]], Group | None]]:
    """Consecutive runs of stackable groups (each with its key), at most :data:`WINDOW_BYTES`
    of sources each, and the unstackable group that ended the run (or None)."""
    window: list[tuple[Group, tuple]] = []
    size = 0
    for g in groups:
        key = stack_key(plan, g)
        if key is None:
            yield window, g
            window, size = [], 0
            continue
        window.append((g, key))
        size += g.nbytes
        if size >= WINDOW_BYTES:
            yield window, None
            window, size = [], 0
    if window:
        yield window, None


class WindowSources:
    """The source bytes of one window: per shard file, the span from the window's first to
    its last tensor, read in one call when it is dense (at most twice their bytes + 1 MiB);
    stacks then copy their rows from memory. Other tensors are read one by one."""

    def __init__(self, reader: TensorReader, tensors: list[SourceTensor]):
        import numpy as np

        self.reader = reader
        self.spans: dict[Path, tuple[int, np.ndarray]] = {}
        by_file: dict[Path, list[SourceTensor]] = {}
        for st in tensors:
            by_file.setdefault(st.file, []).append(st)
        for file, sts in by_file.items():
            if any(st.offset < 0 for st in sts):
                continue
            lo = min(st.offset for st in sts)
            hi = max(st.offset + st.meta.nbytes for st in sts)
            if hi - lo > 2 * sum(st.meta.nbytes for st in sts) + (1 << 20):
                continue
            buf = np.empty(hi - lo, dtype=np.uint8)
            try:
                reader.read_span(file, lo, memoryview(buf), f"bytes {lo}..{hi}")
            except UserError:  # the tensors' own reads name the one that fails
                continue
            self.spans[file] = (lo, buf)

    def stacked(self, sts: list[SourceTensor]) -> torch.Tensor:
        """``[len(sts), *shape]``: tensors of one shape and dtype, stacked."""
        import numpy as np
        import torch

        span = self.spans.get(sts[0].file)
        file = sts[0].file
        if span is None or any(st.file is not file and st.file != file for st in sts):
            return self.reader.read_stacked(sts)
        (lo, buf), meta = span, sts[0].meta
        n = meta.nbytes
        rows = np.empty((len(sts), n), dtype=np.uint8)
        for row, st in zip(rows, sts):
            if st.meta != meta:
                raise RuntimeError(f"internal: {st.name} is {st.meta}, stacked with {meta}")
            row[:] = buf[st.offset - lo : st.offset - lo + n]
        return torch.from_numpy(rows).view(meta.dtype).reshape(len(sts), *meta.shape)


def run_stack(plan: Plan, groups: list[Group], sources: WindowSources, ctx: Context) -> list[torch.Tensor] | None:
    """The outputs of ``groups`` (one stack key), output ``k`` of group ``j`` at ``[k][j]``;
    None when a read or a transform fails or an output is not finite (redo the groups one by one)."""
    g0 = groups[0]
    try:
        tensors = {plan.renamed[s]: sources.stacked([plan.sources[g.sources[i]] for g in groups])
                   for i, s in enumerate(g0.sources)}
        for a in g0.apps:
            inputs = {role: tensors.pop(name) for role, name in a.binding.inputs.items()}
            tensors.update(a.transform.forward(a.binding, inputs, ctx))
    except (TransformError, UserError):  # a refusal or unreadable data: named by the one-by-one pass
        return None
    outs = [tensors[n] for n in g0.outputs]
    return None if any(t.is_floating_point() and not finite(t) for t in outs) else outs


def finite(t: torch.Tensor) -> bool:
    """No NaN or Inf in ``t`` (a min/max reduction propagates both: one fast pass)."""
    import torch

    if t.numel() == 0:
        return True
    if t.dtype not in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        return bool(torch.isfinite(t.float()).all())
    if t.numel() < 1 << 16:  # small: one elementwise pass costs less than two reductions
        return bool(torch.isfinite(t).all())
    lo, hi = torch.aminmax(t)
    return bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))


def convert_window(plan: Plan, window: list[tuple[Group, tuple]], reader: TensorReader, ctx: Context,
                   where: dict[str, ShardWriter], one_by_one: Callable[[Group], None],
                   after_write: Callable[[], None]) -> None:
    """Convert and write a window's groups, stacked by key; the groups of stacks that fail go
    through ``one_by_one`` in output order (which raises the first group's error)."""
    import numpy as np
    import torch

    by_key: dict[tuple, list[Group]] = {}
    for g, key in window:
        by_key.setdefault(key, []).append(g)
    sources = WindowSources(reader, [plan.sources[s] for g, _ in window for s in g.sources])
    failed: set[int] = set()
    done: dict[str, np.ndarray] = {}  # output name -> its bytes
    for groups in by_key.values():
        outs = run_stack(plan, groups, sources, ctx)
        if outs is None:
            failed.update(id(g) for g in groups)
            continue
        for k, rows in enumerate(outs):
            check_planned(plan, groups[0].outputs[k], rows)
            data = rows.detach().contiguous().view(torch.uint8).reshape(len(groups), -1).numpy()
            done.update(zip((g.outputs[k] for g in groups), data))
    del sources
    write_window(where, done, after_write)
    for g, _ in window:
        if id(g) in failed:
            one_by_one(g)


def check_planned(plan: Plan, name: str, rows: torch.Tensor) -> None:
    """A stack of outputs must have the planned shape and dtype of each (equal by key)."""
    m = plan.outputs[name]
    if tuple(rows.shape[1:]) != m.shape or rows.dtype != m.dtype:
        raise RuntimeError(f"internal: {name}: stacked as {tuple(rows.shape[1:])} {rows.dtype}, planned {m}")


def write_window(where: dict[str, ShardWriter], done: dict[str, np.ndarray], after_write: Callable[[], None]) -> None:
    """Write each tensor's bytes to its shard: runs of tensors adjacent in a shard in one
    call each (their bytes gathered back to back), ``after_write()`` after each tensor."""
    import numpy as np

    by_shard: dict[int, list[str]] = {}
    for name in done:
        by_shard.setdefault(id(where[name]), []).append(name)
    for names in by_shard.values():
        w = where[names[0]]
        names.sort(key=w.offsets.__getitem__)
        start = 0
        for i in range(1, len(names) + 1):
            if i == len(names) or w.offsets[names[i]] != w.offsets[names[i - 1]] + w.metas[names[i - 1]].nbytes:
                run = names[start:i]
                w.write_span(run, np.concatenate([done[n] for n in run]) if len(run) > 1 else done[run[0]], after_write)
                start = i
