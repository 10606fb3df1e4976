"""Resolution: a compiled spec and a raw drafter ``config.json`` -> the typed
:class:`ResolvedDrafter` (the record), by way of the flattened config of
``docs/converted-format.md``. Pure function of (spec, raw config); reads no tensors. Compile
ends here: rendering the converted config from the record is :mod:`.converted_config`'s."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..errors import UserError
from .attention import resolve_layers, write_back
from .config_types import check_config_types
from .dotted import get_dotted, pop_dotted, set_dotted, spelled_key
from .keys import account
from .resolved import CONFIG_PREFIX, SPEC_DEFAULT, VALUE_MARK, ResolvedDrafter

if TYPE_CHECKING:
    from .adapter import Adapter


def mlp_kind(hidden_act: str) -> str:
    """Map the config's ``hidden_act`` to an MLP kind: ``silu`` -> swiglu, ``swigluoai`` -> swiglu_oai;
    any other value (or type) is refused here, the one place that lists the known activations."""
    kinds = {"silu": "swiglu", "swigluoai": "swiglu_oai"}
    try:
        return kinds[hidden_act]
    except (KeyError, TypeError):  # TypeError: an unhashable JSON value (list, object)
        raise UserError(f"config: hidden_act {hidden_act!r} is not supported; known: {', '.join(kinds)}") from None


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


def resolve(adapter: Adapter, raw: dict[str, Any], where: str = "config.json") -> ResolvedDrafter:
    """The record of raw ``config.json`` ``raw`` (``where`` names it in refusals)."""
    return resolve_flat(adapter, raw, where)[1]


def resolve_flat(adapter: Adapter, raw: dict[str, Any],
                 where: str = "config.json") -> tuple[dict[str, Any], ResolvedDrafter]:
    """``(flattened config, its record)``: ``raw``'s keys renamed, defaulted and completed as
    the spec and family say, and the :class:`ResolvedDrafter` read from them (every key of
    ``raw`` accounted for). The flattened config is not yet the converted one:
    :func:`~.converted_config.render_config` adds what is rendered from the record."""
    spec = adapter.spec
    cs = spec.config
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a JSON object")
    merged = merge_sections(raw, cs.sections)
    out = copy.deepcopy(merged)

    # aliases and defaults
    sources: dict[str, str] = {}  # flattened key -> where its value came from
    taken: dict[str, Any] = {}  # flattened key -> the spec default it took (as taken)
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
            if value is not None:
                sources[key] = f"{SPEC_DEFAULT} (config.fields.{key}.default)"
                taken[key] = copy.deepcopy(value)
        else:
            sources[key] = f"config.json: {spelled_key(raw, cs.sections, found)}"
        for alias in rule.from_:
            if alias != key:
                pop_dotted(out, alias)
        if value is not None:
            set_dotted(out, key, value)

    # dtype
    dtype_key = next((k for k in cs.dtype_keys if merged.get(k) is not None), None)
    dtype = merged[dtype_key] if dtype_key else cs.default_dtype
    if dtype_key and adapter.blame("config", "default_dtype").startswith("command line: "):
        # config.default_dtype applies only to a config.json without a dtype key: overriding it here changes nothing
        raise UserError(f"{adapter.blame('config', 'default_dtype')}: changes nothing: {where} sets "
                        f"{spelled_key(raw, cs.sections, dtype_key)}={merged[dtype_key]} (config.default_dtype is "
                        "used only when config.json names no dtype; the converted dtype is the checkpoint's)")
    sources["torch_dtype"] = (f"config.json: {spelled_key(raw, cs.sections, dtype_key)}" if dtype_key
                              else f"{SPEC_DEFAULT} (config.default_dtype)")
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

    # types and ranges first (one line per bad key), then family defaults, target-layer
    # convention, attention table
    check_config_types(out, sources, where, spell=lambda key: spelled_key(raw, cs.sections, key))
    adapter.family.complete(out)
    dc = out["dflash_config"]
    ids = list(dc["target_layer_ids"])
    if spec.target_layer_ids == "input":
        ids = [i - 1 for i in ids]
    dc["target_layer_ids"] = ids
    layers = resolve_layers(spec.attention, out, where, blame=lambda i: adapter.blame("attention", "layers", i))
    write_back(out, layers)

    adapter.family.mirror(out)
    for key in [*MATH_KEYS.values(), *SWIGLU_KEYS.values(), *adapter.family.dflash2_keys.values(), "rope_type"]:
        if key not in sources:
            sources[key] = _source(adapter, raw, merged, cs.sections, key)
    if spec.target_layer_ids == "input":
        sources["dflash_config.target_layer_ids"] += " (input convention, shifted by -1)"
    resolved = _record(adapter, out, layers, sources, where, taken)
    resolved = account(adapter, raw, merged, out, resolved, where)  # every key read, fixed or irrelevant
    if spec.max_draft_len is not None and spec.max_draft_len != resolved.max_draft_len:
        raise UserError(
            f"{adapter.path}: max_draft_len: {spec.max_draft_len} contradicts the derived {resolved.max_draft_len} "
            f"(block_size {resolved.block_size}, sample_from_anchor {resolved.sample_from_anchor})"
        )
    return out, resolved


#: ResolvedDrafter field (dotted) -> the flattened config key it is read from.
MATH_KEYS = {
    "dims.hidden": "hidden_size", "dims.heads": "num_attention_heads", "dims.kv_heads": "num_key_value_heads",
    "dims.head_dim": "head_dim", "dims.rotary_dim": "rotary_dim", "dims.intermediate": "intermediate_size",
    "dims.vocab": "vocab_size", "dims.num_layers": "num_hidden_layers", "dims.target_hidden": "target_hidden_size",
    "dims.dtype": "torch_dtype", "rope.theta": "rope_theta", "rms_norm_eps": "rms_norm_eps",
    "mlp.kind": "hidden_act", "block_size": "dflash_config.block_size",
    "mask_token_id": "dflash_config.mask_token_id", "target_layer_ids": "dflash_config.target_layer_ids",
    "sample_from_anchor": "dspark_config.sample_from_anchor", "heads.markov_rank": "dspark_config.markov_rank",
    "heads.markov_head_type": "dspark_config.markov_head_type",
    "heads.confidence": "dspark_config.enable_confidence_head",
    "heads.confidence_with_markov": "dspark_config.confidence_head_with_markov",
}
SWIGLU_KEYS = {"mlp.alpha": "swiglu_alpha", "mlp.limit": "swiglu_limit"}
#: other raw spellings of a flattened key (the family reads both; see ``complete_rope``)
ALT_SPELLINGS = {"rope_theta": ("rope_parameters.rope_theta",),
                 "rope_type": ("rope_scaling.rope_type", "rope_scaling.type", "rope_parameters.rope_type")}


def _source(adapter: Adapter, raw, merged, sections, key: str) -> str:
    """Where the flattened ``key`` came from when no config.fields rule set it (the raw
    ``config.json`` key, never a file path: the record must not depend on where it was read)."""
    for spelling in (key, *ALT_SPELLINGS.get(key, ())):
        if get_dotted(merged, spelling) is not None:
            return f"config.json: {spelled_key(raw, sections, spelling)}"
    derived = adapter.family.derived.get(key)
    return f"derived: {derived}" if derived else f"family {adapter.family.name} default"


def _record(adapter: Adapter, out: dict[str, Any], layers, sources: dict[str, str], where: str,
            taken: dict[str, Any] | None = None) -> ResolvedDrafter:
    """The :class:`ResolvedDrafter` of a completed flattened config ``out``. ``taken``: the
    spec defaults flattening took (key -> value); those outside the resolved fields are
    recorded in ``sources`` as ``config.<key>`` with their value."""
    dc, ds = out["dflash_config"], out["dspark_config"]
    kind = mlp_kind(out["hidden_act"])
    src = {field: sources[key] for field, key in MATH_KEYS.items()}
    if kind == "swiglu_oai":
        src.update({field: sources[key] for field, key in SWIGLU_KEYS.items()})
    rope_type, scaling, scaling_sources = adapter.family.rope_scaling(out)
    src["rope.type"] = src["rope.scaling"] = sources["rope_type"]
    src.update({f"rope.scaling.{k}": v for k, v in scaling_sources.items()})
    src.update({field: sources[key] for field, key in adapter.family.dflash2_keys.items()})
    src["norms"] = "spec: weights.transforms (norm_fold_gemma modes)"
    src["layers"] = "config.json: layer_types, sliding_window, is_causal + spec: attention"
    read = {*MATH_KEYS.values(), *SWIGLU_KEYS.values(), *adapter.family.dflash2_keys.values(), "rope_type"}
    for key, value in (taken or {}).items():  # spec defaults of keys outside the fields above
        if key not in read:
            src[f"{CONFIG_PREFIX}{key}"] = f"{sources[key]}{VALUE_MARK}{json.dumps(value)}"
    try:
        return ResolvedDrafter.model_validate(dict(
            adapter=adapter.spec.name,
            spec_sha256=adapter.spec_sha256,
            family=adapter.family.name,
            dims=dict(
                hidden=out["hidden_size"], heads=out["num_attention_heads"], kv_heads=out["num_key_value_heads"],
                head_dim=out["head_dim"], rotary_dim=out["rotary_dim"], intermediate=out["intermediate_size"],
                vocab=out["vocab_size"], num_layers=out["num_hidden_layers"],
                target_hidden=out["target_hidden_size"], num_target_layers=len(dc["target_layer_ids"]),
                dtype=out["torch_dtype"],
            ),
            rope=dict(theta=out["rope_theta"], type=rope_type, scaling=scaling),
            rms_norm_eps=out["rms_norm_eps"],
            mlp=dict(kind=kind, alpha=out.get("swiglu_alpha") if kind == "swiglu_oai" else None,
                     limit=out.get("swiglu_limit") if kind == "swiglu_oai" else None),
            block_size=dc["block_size"],
            mask_token_id=dc["mask_token_id"],
            target_layer_ids=tuple(dc["target_layer_ids"]),
            sample_from_anchor=ds["sample_from_anchor"],
            norms=adapter.norm_styles(),
            heads=dict(markov_rank=ds["markov_rank"], markov_head_type=ds["markov_head_type"],
                         confidence=ds["enable_confidence_head"],
                         confidence_with_markov=ds["enable_confidence_head"] and ds["confidence_head_with_markov"]),
            layers=tuple(layers),
            dflash2=adapter.family.dflash2(out),
            sources=src,
        ))
    except ValidationError as e:
        raise UserError(*(_refusal(where, x, adapter.family.dflash2_keys) for x in e.errors())) from None


def _refusal(where: str, error: dict, more_keys: dict[str, str] | None = None) -> str:
    """One line for a record validation error: a field's names the config key it was read from;
    a record rule's (``Dims``: heads dividing, ``rotary_dim``; the record's: mask id < vocab) is its own
    message, which names its keys."""
    dotted = ".".join(str(p) for p in error["loc"])
    key = MATH_KEYS.get(dotted) or SWIGLU_KEYS.get(dotted) or (more_keys or {}).get(dotted)
    if key is None and error["type"] == "value_error" and dotted in ("", "dims", "heads"):
        return f"{where}: {error['ctx']['error']}"
    return f"{where}: {key or dotted or 'config'}: {error['msg']}"
