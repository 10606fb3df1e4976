"""Converting many small groups at once: groups whose transform chains are elementwise and
whose sources have equal shapes and dtypes run as one stack (one read call per tensor into
a shared buffer, one transform call, one finiteness check, one conversion to bytes per
output), instead of ~10 torch operations per tensor.

Bit-identical to converting each group alone: an elementwise transform applied to inputs
stacked along a new leading dim returns the stack of its outputs
(:attr:`Transform.elementwise`). A stack that fails (a transform refuses, or an output is
not finite) is redone group by group, so the error is the one of the first failing group
in output order, word for word.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from ...transforms.base import Context, TransformError

from ..errors import UserError
from .checkpoint import TensorReader
from .plan import Group, Plan
from .writer import ShardWriter

#: groups whose sources hold at most this many bytes are stacked (per-call overhead dominates)
SMALL_GROUP_BYTES = 1 << 16
#: source bytes of the groups collected into one window (bounds the memory of stacks)
WINDOW_BYTES = 32 << 20


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


def run_stack(plan: Plan, groups: list[Group], reader: TensorReader, ctx: Context) -> list[torch.Tensor] | None:
    """The outputs of ``groups`` (one stack key), output ``k`` of group ``j`` at ``[k][j]``;
    None when a read or a transform fails or an output is not finite (redo the groups one by one)."""
    g0 = groups[0]
    try:
        tensors = {plan.renamed[s]: reader.read_stacked([plan.sources[g.sources[i]] for g in groups])
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
    by_key: dict[tuple, list[Group]] = {}
    for g, key in window:
        by_key.setdefault(key, []).append(g)
    failed: set[int] = set()
    for groups in by_key.values():
        outs = run_stack(plan, groups, reader, ctx)
        if outs is None:
            failed.update(id(g) for g in groups)
            continue
        for k, rows in enumerate(outs):
            write_rows(where, [g.outputs[k] for g in groups], rows, after_write)
        del outs
    for g, _ in window:
        if id(g) in failed:
            one_by_one(g)


def write_rows(where: dict[str, ShardWriter], names: list[str], rows: torch.Tensor,
               after_write: Callable[[], None]) -> None:
    """Write ``rows[i]`` as ``names[i]``, each to its shard (consecutive names of one shard
    in one call), ``after_write()`` after each tensor."""
    start = 0
    for i in range(1, len(names) + 1):
        if i == len(names) or where[names[i]] is not where[names[start]]:
            where[names[start]].write_rows(names[start:i], rows[start:i], after_write)
            start = i

