"""Config flattening: raw drafter ``config.json`` -> the flattened config of
``docs/converted-format.md``. Pure function of (spec, raw config); reads no tensors."""

from __future__ import annotations

import copy
from typing import Any

from .attention import resolve_layers, write_back
from ..errors import UserError
from .family import get_dotted, pop_dotted, set_dotted


def merge_sections(raw: dict[str, Any], sections: list[str]) -> dict[str, Any]:
    """Top level overlaid by each section, earliest section winning; sections removed."""
    out = {k: copy.deepcopy(v) for k, v in raw.items() if k not in sections}
    for sec in reversed(sections):
        nested = raw.get(sec)
        if nested is None:
            continue
        if not isinstance(nested, dict):
            raise UserError(f"config: {sec} must be a mapping, found {type(nested).__name__}")
        for k, v in nested.items():
            out[k] = copy.deepcopy(v)
    return out


def flatten(adapter, raw: dict[str, Any], where: str = "config.json") -> dict[str, Any]:
    """See module docstring. ``adapter`` is a compiled :class:`~.engine.Adapter`."""
    spec = adapter.spec
    cs = spec.config
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a JSON object")
    merged = merge_sections(raw, cs.sections)
    out = copy.deepcopy(merged)

    # aliases and defaults
    for key, rule in cs.fields.items():
        value, found = None, None
        for alias in rule.from_:
            v = get_dotted(merged, alias)
            if v is not None:
                value, found = v, alias
                break
        if found is None:
            if rule.default is None and rule.required:
                raise UserError(f"{where}: none of {', '.join(rule.from_) or key} is set (needed for {key})")
            value = copy.deepcopy(rule.default)
        for alias in rule.from_:
            if alias != key:
                pop_dotted(out, alias)
        if value is not None:
            set_dotted(out, key, value)

    # dtype
    dtype = next((merged[k] for k in cs.dtype_keys if merged.get(k) is not None), cs.default_dtype)
    for k in cs.dtype_keys:
        out.pop(k, None)
    out["torch_dtype"] = str(dtype).removeprefix("torch.")

    # quantization: refused unless a weight transform dequantizes that format
    qc = merged.get("quantization_config")
    if isinstance(qc, dict) and cs.refuse_unhandled_quantization:
        method = qc.get("quant_method")
        handled = adapter.quant_methods
        if method not in handled:
            raise UserError(
                f"{where}: quantization_config.quant_method {method!r} is not dequantized by any weight "
                f"transform of adapter {spec.name} (handled: {', '.join(sorted(handled)) or 'none'})"
            )
    for key in cs.drop:
        pop_dotted(out, key)

    # family defaults, target-layer convention, attention table
    adapter.family.complete(out)
    dc = out["dflash_config"]
    ids = list(dc["target_layer_ids"])
    if spec.target_layer_ids == "input":
        ids = [i - 1 for i in ids]
    dc["target_layer_ids"] = ids
    layers = resolve_layers(spec.attention, out, where)
    write_back(out, layers)

    adapter.family.mirror(out)
    mdl = adapter.family.max_draft_len(out)
    if spec.max_draft_len is not None and spec.max_draft_len != mdl:
        raise UserError(
            f"{adapter.path}: max_draft_len: {spec.max_draft_len} contradicts the derived {mdl} "
            f"(block_size {dc['block_size']}, sample_from_anchor {out['dspark_config']['sample_from_anchor']})"
        )
    out["draftsmith"] = {
        "adapter": spec.name,
        "spec_sha256": adapter.spec_sha256,
        "family": adapter.family.name,
        "target_layer_ids_convention": "output",
        "max_draft_len": mdl,
        "norms": adapter.norm_styles(),
        "layers": [l.as_dict() for l in layers],
    }
    return dict(sorted(out.items()))
