"""Pick each layer's attention lowering for the device the host runs on."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ...lowering.base import LoweringInfo, get_lowering


def device_class(device: torch.device | str) -> str:
    """``"cpu"``; ``"sm90"`` for CUDA capability 9.x; ``"sm100"`` for 10.x; else ``"sm{major}{minor}"``."""
    device = torch.device(device)
    if device.type == "cpu":
        return "cpu"
    if device.type != "cuda":
        raise ValueError(f"unsupported device {device}")
    major, minor = torch.cuda.get_device_capability(device)
    if major in (9, 10):
        return f"sm{major}0"
    return f"sm{major}{minor}"


def choose_lowerings(
    tables: Sequence[dict], dev_class: str, override: Optional[str] = None, head_dim: Optional[int] = None
) -> list[LoweringInfo]:
    """Per layer: ``override`` if given, else ``tables[i][dev_class]``; each must be available.

    Raises ``ValueError`` naming the layer when the table has no entry for ``dev_class`` and
    ``RuntimeError`` when the chosen lowering cannot run here (``available()`` false,
    ``dev_class`` not among its devices, or ``head_dim`` not among its head dims). Unknown
    names raise ``KeyError`` listing known ones.
    """
    chosen = []
    for i, table in enumerate(tables):
        name = override or table.get(dev_class)
        if name is None:
            raise ValueError(
                f"layer {i} has no lowering for device class {dev_class!r} (table: {table}); "
                "pass lowering=<name> to override"
            )
        info = get_lowering(name)
        if dev_class not in info.devices:
            raise RuntimeError(f"layer {i}: lowering {name!r} runs on {info.devices}, not {dev_class!r}")
        dims = getattr(info, "head_dims", None)
        if head_dim is not None and dims is not None and head_dim not in dims:
            raise RuntimeError(f"layer {i}: lowering {name!r} supports head dims {list(dims)}, not {head_dim}")
        if not info.available():
            raise RuntimeError(f"layer {i}: lowering {name!r} is not available in this process ({info.description})")
        chosen.append(info)
    return chosen
