"""Per-layer attention resolution: windows, causality and lowerings (reference section 2).

Inputs are canonical config keys (``layer_types``, ``sliding_window``,
``dflash_config.use_swa``, ``dflash_config.swa_window_size``, ``is_causal``,
``sliding_window_non_causal``) and the spec's ``attention`` section. Precedence, low to
high: family default < explicit checkpoint metadata (when ``explicit_causality_wins``) <
per-layer overrides in the spec.
"""

from __future__ import annotations

from typing import Any, Optional

from ...lowering.base import DEVICE_CLASSES, MaskSpec
from ..errors import UserError
from ..spec.schema import AttentionSpec
from .dotted import get_dotted
from .resolved import LayerPlan


def resolve_layers(att: AttentionSpec, cfg: dict[str, Any], where: str = "config",
                   blame=None) -> list[LayerPlan]:
    """Each layer's mask and lowering per device class (see the module docstring); ``blame(i)``:
    who set ``attention.layers.<i>`` (a command-line argument is named instead of ``where``)."""
    n = cfg["num_hidden_layers"]
    layer_types = cfg.get("layer_types")
    use_swa = get_dotted(cfg, "dflash_config.use_swa")
    window = att.window or cfg.get("sliding_window") or get_dotted(cfg, "dflash_config.swa_window_size")

    if layer_types is not None:
        if len(layer_types) != n:
            raise UserError(f"{where}: layer_types has {len(layer_types)} entries for {n} layers")
        bad = sorted({t for t in layer_types if t not in ("sliding_attention", "full_attention")})
        if bad:
            raise UserError(f"{where}: layer_types: unknown {bad} (sliding_attention, full_attention)")
        windowed = [t == "sliding_attention" for t in layer_types]
    else:
        windowed = [bool(use_swa)] * n
    if att.hf_window_switch:  # Qwen3Config: no window unless use_sliding_window (spec field docs)
        if cfg.get("use_sliding_window") is True and layer_types is None:
            raise UserError(f"{where}: use_sliding_window is true but layer_types is missing "
                            "(transformers would derive it from max_window_layers); give layer_types")
        if cfg.get("use_sliding_window") is not True:
            windowed = [False] * n
            layer_types, use_swa = None, False

    causal = [att.windowed_causal if w else att.full_causal for w in windowed]
    if att.explicit_causality_wins:
        if isinstance(cfg.get("is_causal"), bool):
            causal = [cfg["is_causal"]] * n
        if isinstance(cfg.get("sliding_window_non_causal"), bool):
            causal = [(not cfg["sliding_window_non_causal"]) if w else c for w, c in zip(windowed, causal)]

    windows: list[Optional[int]] = [window if w else None for w in windowed]
    for i, o in att.layers.items():
        if not 0 <= i < n:
            who = blame(i) if blame is not None else ""
            who = who if who.startswith("command line: ") else where
            raise UserError(f"{who}: attention.layers.{i}: no such layer (the drafter has {n}, per {where})")
        if o.window is not None:
            windows[i] = None if o.window == "full" else o.window
        if o.causal is not None:
            causal[i] = o.causal

    out = []
    for i in range(n):
        if windows[i] is None and (layer_types is not None and layer_types[i] == "sliding_attention" or
                                   layer_types is None and use_swa) and i not in att.layers:
            raise UserError(f"{where}: layer {i} is windowed but no window size is given "
                            "(sliding_window, dflash_config.swa_window_size or attention.window)")
        kind = "full" if windows[i] is None else "windowed"
        choice = att.lowering[kind]
        out.append(LayerPlan(mask=MaskSpec(causal[i], windows[i]),
                             lowering={d: getattr(choice, d) for d in DEVICE_CLASSES}))
    return out


def write_back(cfg: dict[str, Any], layers: list[LayerPlan]) -> None:
    """Write the resolved table in the HF and DFlash spellings (in place)."""
    masks = [l.mask for l in layers]
    windows = sorted({m.window for m in masks if m.window is not None})
    cfg["layer_types"] = ["full_attention" if m.window is None else "sliding_attention" for m in masks]
    cfg["sliding_window"] = windows[-1] if windows else None
    dc = cfg.setdefault("dflash_config", {})
    dc["use_swa"] = bool(windows)
    if windows:
        dc["swa_window_size"] = windows[-1]
    else:
        dc.pop("swa_window_size", None)
    causal = {m.causal for m in masks}
    if len(causal) == 1:
        cfg["is_causal"] = causal.pop()
    cfg.pop("sliding_window_non_causal", None)
