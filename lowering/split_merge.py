"""The split-KV merge: partial outputs of ``S`` key splits -> one output per row, by
log-sum-exp (used by ``triton_window_block`` and ``gluon_window_block``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Optional

import torch

from .jit import jitted, next_pow2, sm_count

try:  # Triton is optional: the kernel signature below parses without it.
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    tl = SimpleNamespace(constexpr="constexpr")

# The merge's tuned parameters: (value, the rule it follows, the lab log entry that measured it).
TUNED = {
    "max_rows": (8, "rows a program at most, reached once there are several programs a multiprocessor",
                 "lab/log.md#a06"),
    "warps": (4, "warps a program", "lab/log.md#a06"),
}
MERGE_MAX_ROWS, MERGE_WARPS = TUNED["max_rows"][0], TUNED["warps"][0]


def _reduce_kernel(
    po_ptr, plse_ptr, out_ptr, lse_ptr,
    s_on, s_ob, s_oh,
    B, HQ, D, NUM_SPLITS, NUM_ROWS,
    ROWS: tl.constexpr, S_PAD: tl.constexpr, D_PAD: tl.constexpr, RETURN_LSE: tl.constexpr,
):
    """Merge the split partials of ``ROWS`` consecutive (n, j, head) rows by log-sum-exp
    (the rows' partials are one contiguous run of ``ROWS * S * D_PAD`` floats)."""
    row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = row < NUM_ROWS
    sp = tl.arange(0, S_PAD)
    sp_ok = sp < NUM_SPLITS
    dim = tl.arange(0, D_PAD)
    dim_ok = dim < D
    total = B * HQ  # rows per sequence
    n = row // total
    rem = row % total
    j = rem // HQ
    h = rem % HQ
    ok2 = row_ok[:, None] & sp_ok[None, :]
    lse_s = tl.load(plse_ptr + row[:, None] * NUM_SPLITS + sp[None, :], mask=ok2, other=float("-inf"))
    m = tl.max(lse_s, 1)
    m = tl.where(m == float("-inf"), 0.0, m)  # a row no split saw: weights 0, den 0 below
    w = tl.where(ok2, tl.math.exp2(lse_s - m[:, None]), 0.0)
    den = tl.sum(w, 1)
    has = den > 0.0
    den = tl.where(has, den, 1.0)  # no key at all: output 0, LSE -inf (as with one split)
    po = tl.load(po_ptr + ((row[:, None] * NUM_SPLITS + sp[None, :]) * D_PAD)[:, :, None] + dim[None, None, :],
                 mask=ok2[:, :, None] & dim_ok[None, None, :], other=0.0)
    o = tl.sum(po * w[:, :, None], 1) / den[:, None]
    o_off = n * s_on + j * s_ob + h * s_oh
    tl.store(out_ptr + o_off[:, None] + dim[None, :], o.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & dim_ok[None, :])
    if RETURN_LSE:
        tl.store(lse_ptr + row, tl.where(has, m + tl.math.log2(den), float("-inf")) * 0.6931471805599453,
                 mask=row_ok)


def merge_splits(po, plse, out, lse=None, d: Optional[int] = None, rows: Optional[int] = None,
                 num_warps: Optional[int] = None):
    """Merge split partials into ``out`` ``[N, B, Hq, D]`` (and ``lse``, natural log, when
    given): ``po`` ``[N, B, Hq, S, D_PAD]`` normalised float32 outputs, ``plse`` ``[N, B, Hq, S]``
    their log2-sum-exps (-inf for a split that saw no key). ``d``: the head dim (default
    D_PAD). ``rows`` per program and ``num_warps`` default to :func:`merge_config`."""
    n, b, hq, s, d_pad = po.shape
    num_rows = n * b * hq
    auto_rows, auto_warps = merge_config(num_rows, s, po.device)
    rows, num_warps = rows or auto_rows, num_warps or auto_warps
    (reduce,) = jitted(_reduce_kernel)
    reduce[(-(-num_rows // rows),)](
        po, plse, out, lse if lse is not None else out,
        out.stride(0), out.stride(1), out.stride(2),
        b, hq, d or d_pad, s, num_rows,
        ROWS=rows, S_PAD=max(2, next_pow2(s)), D_PAD=d_pad, RETURN_LSE=lse is not None, num_warps=num_warps,
    )


_SCRATCH: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def split_scratch(n: int, b: int, hq: int, num_splits: int, d_pad: int, device: torch.device):
    """``(po, plse)``: the split partials' float32 buffers ``[N, B, Hq, S, D_PAD]`` and ``[N, B, Hq, S]``,
    allocated on the first call for this shape, device and current stream and reused after (the
    kernels of one stream run in order, so every layer may share them; a CUDA graph captured with
    them keeps reading the same, never freed, buffers)."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream, n, b, hq, num_splits, d_pad)
    if key not in _SCRATCH:
        _SCRATCH[key] = (torch.empty((n, b, hq, num_splits, d_pad), dtype=torch.float32, device=device),
                         torch.empty((n, b, hq, num_splits), dtype=torch.float32, device=device))
    return _SCRATCH[key]


def merge_config(num_rows: int, num_splits: int, device: torch.device) -> tuple[int, int]:
    """``(rows per program, warps)`` of the merge: one row per program while rows are few
    (batch 1: more programs in flight), more once there are several programs per
    multiprocessor anyway, never more than 64 partials per program (:data:`TUNED`; found with
    ``lab/split_merge.py``, ``lab/log.md#a06``)."""
    per_sm = num_rows // (4 * sm_count(device))
    cap = max(1, 64 // next_pow2(num_splits))
    return max(1, min(MERGE_MAX_ROWS, cap, next_pow2(per_sm + 1) // 2)), MERGE_WARPS
