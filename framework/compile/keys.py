"""Every config key accounted for: read, fixed by the spec, or declared irrelevant.

A key of a drafter's ``config.json`` (in the merged view of the spec's sections, nested
mappings walked) is *accounted for* when the family reads it (``GQADFlash.consumes``), a
``config.fields`` rule names it as an alias, it is a ``dtype_keys`` entry or a routing key
(``architectures``, ``model_type``, ``speculators_model_type``), it is a
``quantization_config`` that a weight transform dequantizes, or the spec lists it under
``config.fixed`` (value checked), ``config.irrelevant`` (reason reported) or
``config.writer_ignores`` (dropped as the checkpoint's writer ignores it; the reader that
differs reported). Null values
read as absent. Any other key is refused in one line naming it as the raw config spells
it: a key nobody reads may change the math (``dflash_config.attention_value_scale`` did).

Also read here: ``dflash_config.attention_value_scale`` (the values' scale, a positive
number) and TensorRT-LLM's ``dspark_config.shift_label`` (must agree with the resolved
``sample_from_anchor``).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from .dotted import get_dotted, spelled_key
from .resolved import CONFIG_PREFIX, VALUE_MARK, ResolvedDrafter

if TYPE_CHECKING:
    from .adapter import Adapter

ROUTING_KEYS = ("architectures", "model_type", "speculators_model_type")
VALUE_SCALE = "dflash_config.attention_value_scale"


def accounted_keys(family, cs) -> dict[str, str]:
    """Dotted key -> who accounts for it (each entry covers the key's subtree): ``family``'s
    lists and config spec ``cs``'s aliases, dtype keys, ``fixed``, ``irrelevant``, ``writer_ignores``."""
    out = {k: f"family {family.name}" for k in family.consumes}
    out.update({k: "routing" for k in ROUTING_KEYS})
    out.update({k: "config.dtype_keys" for k in cs.dtype_keys})
    for key, rule in cs.fields.items():
        out.update({a: f"config.fields.{key}" for a in rule.from_})
    out.update({k: f"family {family.name} (fixed)" for k in family.fixed})
    out.update({k: f"family {family.name} (irrelevant)" for k in family.irrelevant})
    out.update({k: "config.fixed" for k in cs.fixed})
    out.update({k: "config.irrelevant" for k in cs.irrelevant})
    out.update({k: "config.writer_ignores" for k in cs.writer_ignores})
    return out


def unaccounted(family, cs, quant_methods, merged: dict[str, Any]) -> list[str]:
    """Dotted keys of ``merged`` (a raw config, sections merged) that neither ``family`` nor config
    spec ``cs`` accounts for: non-null leaves, mappings walked; a ``quantization_config`` whose
    method is in ``quant_methods`` (dequantized by a weight transform) counts as read."""
    known = accounted_keys(family, cs)
    qc = merged.get("quantization_config")
    if isinstance(qc, dict) and qc.get("quant_method") in quant_methods:
        known["quantization_config"] = "weights.transforms"
    out: list[str] = []

    def visit(d: dict[str, Any], prefix: str) -> None:
        for k, v in d.items():
            key = prefix + str(k)
            if v is None or key in known:
                continue
            if isinstance(v, dict):
                visit(v, key + ".")
            else:
                out.append(key)

    visit(merged, "")
    return out


def _same(a: Any, b: Any) -> bool:
    """JSON equality that keeps ``true`` apart from ``1`` (numbers compare as numbers)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) in (int, float) and type(b) in (int, float) and a == b or type(a) is type(b) and a == b


def account(adapter: Adapter, raw: dict[str, Any], merged: dict[str, Any], out: dict[str, Any],
            resolved: ResolvedDrafter, where: str) -> ResolvedDrafter:
    """Check every key of ``merged`` (the raw config, sections merged) is accounted for, the
    ``fixed`` values, the V scale and ``shift_label``; return ``resolved`` with ``value_scale``,
    the present ``irrelevant`` keys and the sources of both. Problems are refused together,
    one line each."""
    spec, sections = adapter.spec.config, adapter.spec.config.sections
    problems = [f"{where}: {spelled_key(raw, sections, k)}: not read by family {adapter.family.name} nor adapter "
                f"{adapter.name}: refused (a key that changes nothing goes under config.irrelevant with its reason)"
                for k in unaccounted(adapter.family, spec, adapter.quant_methods, merged)]
    sources = dict(resolved.sources)
    for key, want in adapter.family.fixed.items():
        got = get_dotted(merged, key)
        if got is not None and not _same(got, want):
            problems.append(f"{where}: {spelled_key(raw, sections, key)}: {json.dumps(got)[:60]}, but family "
                            f"{adapter.family.name} implements only {json.dumps(want)}")
    for key, want in spec.fixed.items():
        got = get_dotted(merged, key)
        if got is not None and not _same(got, want):
            problems.append(f"{where}: {spelled_key(raw, sections, key)}: {json.dumps(got)[:60]}, but adapter "
                            f"{adapter.name} implements only {json.dumps(want)} (config.fixed)")
        src = (f"config.json: {spelled_key(raw, sections, key)} (as config.fixed requires)" if got is not None
               else "spec default (config.fixed; not in config.json)")
        sources[f"{CONFIG_PREFIX}{key}"] = f"{src}{VALUE_MARK}{json.dumps(want)}"
    scale = get_dotted(out, VALUE_SCALE)
    if scale is not None and not (type(scale) in (int, float) and math.isfinite(scale) and scale > 0):
        problems.append(f"{where}: {spelled_key(raw, sections, VALUE_SCALE)}: {json.dumps(scale)[:60]} must be a "
                        "finite number > 0")
    shift = get_dotted(merged, "dspark_config.shift_label")
    aliased = any("dspark_config.shift_label" in r.from_ for r in spec.fields.values())
    if shift is not None and not aliased and shift is not resolved.sample_from_anchor:
        problems.append(f"{where}: {spelled_key(raw, sections, 'dspark_config.shift_label')}: {json.dumps(shift)} "
                        f"contradicts sample_from_anchor {json.dumps(resolved.sample_from_anchor)} "
                        f"({resolved.sources.get('sample_from_anchor', '')})")
    if problems:
        raise UserError(*problems)
    sources["value_scale"] = (f"config.json: {spelled_key(raw, sections, VALUE_SCALE)}" if scale is not None
                              else f"family {adapter.family.name} default (no value scale)")
    present = {k: why for k, why in {**adapter.family.irrelevant, **spec.irrelevant}.items()
               if get_dotted(merged, k) is not None}
    data = resolved.model_dump(mode="json")
    data.pop("max_draft_len", None)
    ignored = {k: who for k, who in spec.writer_ignores.items() if get_dotted(merged, k) is not None}
    for key, default in adapter.family.bias_keys.items():
        sources[key] = (f"config.json: {spelled_key(raw, sections, key)}" if get_dotted(merged, key) is not None
                        else f"family {adapter.family.name} default (transformers' default {json.dumps(default)})")
    sources["qk_norm"] = "spec: layout.qk_norm"
    data.update(value_scale=float(scale) if scale is not None else 1.0, irrelevant=present, writer_ignored=ignored,
                attention_bias=out["attention_bias"], mlp_bias=out["mlp_bias"],
                qk_norm=adapter.spec.layout.qk_norm, sources=sources)
    return ResolvedDrafter.model_validate(data)
