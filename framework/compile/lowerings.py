"""``validate_lowerings``: the lowering of every layer on one device class, checked.

The need for TensorRT-LLM's separate context (prefill FMHA) kernel is *derived* from the
chosen lowerings rather than assumed: a drafter whose every layer runs on a lowering that
does its own context attention (``dense``, ``window_decode_merge``, ``trtllm_gen``,
``triton_window_block``) needs none, so head dims that kernel lacks (72, 80, 96) are
accepted; a layer whose lowering does need it is still checked against
``context_kernel_head_dims``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ...lowering.base import get_lowering

from .attention import DEVICE_CLASSES
from ..errors import UserError

#: Head dims assumed for TensorRT-LLM's context FMHA kernel on this path (an assumption,
#: see docs/trtllm-interface.md); only checked for layers whose lowering needs that kernel.
CONTEXT_KERNEL_HEAD_DIMS: tuple[int, ...] = (64, 128, 256)


@dataclass(frozen=True)
class LoweringTable:
    device: str
    lowerings: tuple[str, ...]  # per layer
    needs_context_kernel: bool


def validate_lowerings(adapter_or_config: Any, device: str, *, check_available: bool = False,
                       context_kernel_head_dims: Sequence[int] = CONTEXT_KERNEL_HEAD_DIMS,
                       raw_config: dict | None = None) -> LoweringTable:
    """Lowering per layer on ``device`` (``sm100``, ``sm90`` or ``cpu``), checked.

    ``adapter_or_config``: a flattened config (with its ``draftsmith`` section), or an
    :class:`~.engine.Adapter` together with ``raw_config`` (default: its synthetic config).
    Raises :class:`UserError` naming the layer when a lowering does not run on ``device``,
    does not support the head dim, needs a context kernel the head dim lacks, or (with
    ``check_available``) cannot run in this process.
    """
    if device not in DEVICE_CLASSES:
        raise UserError(f"device class {device!r}: expected one of {', '.join(DEVICE_CLASSES)}")
    cfg = adapter_or_config
    if not isinstance(cfg, dict):
        from ..convert.synth import source_config

        cfg = cfg.flatten_config(raw_config if raw_config is not None else source_config(cfg, "full"))
    head_dim = cfg["head_dim"]
    names, needs = [], False
    for i, layer in enumerate(cfg["draftsmith"]["layers"]):
        name = layer["lowering"][device]
        info = get_lowering(name)
        where = f"layer {i} ({'full' if layer['window'] is None else 'window ' + str(layer['window'])})"
        if device not in info.devices:
            raise UserError(f"{where}: lowering {name} does not run on {device} (runs on {', '.join(info.devices)})")
        if info.head_dims is not None and head_dim not in info.head_dims:
            raise UserError(f"{where}: lowering {name} supports head dims {list(info.head_dims)}, not {head_dim}")
        if info.needs_context_kernel:
            needs = True
            if head_dim not in context_kernel_head_dims:
                raise UserError(f"{where}: lowering {name} needs the context kernel, which has no head dim {head_dim}")
        if check_available and not info.available():
            raise UserError(f"{where}: lowering {name} cannot run in this process")
        names.append(name)
    return LoweringTable(device, tuple(names), needs)
