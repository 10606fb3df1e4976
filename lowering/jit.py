"""Lazy ``triton.jit`` for this package's kernels, and the interpreter switch.

Kernels are written as plain Python functions and decorated on first use, once per
interpreter mode: Triton reads ``TRITON_INTERPRET`` when a function is decorated, so a
module that decorated at import could not serve both CUDA runs and CPU runs through the
interpreter (tests) in one process tree.
"""

from __future__ import annotations

import os

import torch

try:  # Triton is optional: callers report themselves unavailable without it
    import triton
except ImportError:  # pragma: no cover - depends on the environment
    triton = None

_JITTED: dict[tuple, tuple] = {}


def interpret_on() -> bool:
    """``TRITON_INTERPRET`` is set to a true value (kernels then run on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def next_pow2(x: int) -> int:
    """Smallest power of 2 >= ``x`` (1 for ``x <= 1``): Triton block sizes."""
    return 1 << max(0, (x - 1).bit_length())


def jitted(*fns):
    """``triton.jit`` of each of ``fns`` for the current interpreter mode (cached)."""
    key = (interpret_on(),) + fns
    if key not in _JITTED:
        _JITTED[key] = tuple(triton.jit(f) for f in fns)
    return _JITTED[key]


def check_interpreter() -> None:
    """Raise unless CPU tensors can run through the interpreter (set before triton's import)."""
    if not interpret_on():
        raise RuntimeError("Triton kernels run on CPU tensors only with TRITON_INTERPRET=1")
    from triton.runtime.interpreter import InterpretedFunction
    import triton.language as tl

    if not isinstance(tl.zeros, InterpretedFunction):
        raise RuntimeError("TRITON_INTERPRET=1 was set after triton was imported; set it before")


_SM_COUNT: dict[int, int] = {}


def sm_count(device: torch.device) -> int:
    """Multiprocessors of ``device`` (cached); 4 on the CPU interpreter."""
    if device.type != "cuda":
        return 4  # the interpreter: a few "multiprocessors" so that tests exercise splits
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]
