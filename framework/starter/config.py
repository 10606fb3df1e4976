"""``draftsmith init``: the ``config`` pieces of a starter spec (fields, the config section with
the keys no rule reads fixed at their value, the target-layer-id convention, the ``synth.tiny``
overrides).

Each function returns its piece of the :class:`AdapterSpec` and writes its comments and
TODOs into a :class:`~.read.Remarks`.
"""

from __future__ import annotations

import re
from typing import Any

from ...transforms.base import get_transform
from ..compile.dotted import get_dotted
from ..compile.family import GQADFlash
from ..compile.keys import unaccounted
from ..spec.loading import adapter_files, load_spec
from ..spec.schema import ConfigSpec, FieldRule, TransformRule
from .read import Checkpoint, Remarks

#: flattened key -> regex over the last component of config keys that may spell it
ALIASES: dict[str, str] = {
    "dflash_config.block_size": r"^(\w+_)?block_size$",
    "dflash_config.mask_token_id": r"^(\w+_)?(mask_token_id|noise_token_id)$",
    "dflash_config.target_layer_ids": r"^(\w+_)?(target_layer_ids|aux_hidden_state_layer_ids)$",
    "dspark_config.markov_rank": r"^(\w+_)?markov_rank$",
    "dspark_config.markov_head_type": r"^(\w+_)?markov_head_type$",
    "dspark_config.enable_confidence_head": r"^(enable_confidence_head|use_confidence_head)$",
    "dspark_config.confidence_head_with_markov": r"^confidence_head_with_markov$",
    "dspark_config.sample_from_anchor": r"^(sample_from_anchor|shift_label)$",
}
#: the value type each alias must have (a key of another type is a different thing)
ALIAS_TYPES: dict[str, Any] = {
    "dflash_config.block_size": int, "dflash_config.mask_token_id": int, "dflash_config.target_layer_ids": list,
    "dspark_config.markov_rank": int, "dspark_config.markov_head_type": str,
    "dspark_config.enable_confidence_head": bool, "dspark_config.confidence_head_with_markov": bool,
    "dspark_config.sample_from_anchor": bool,
}
INTERMEDIATE = r"^(intermediate_size|dense_intermediate_size|(\w+_)?ffn_hidden_size)$"
FIELDS = ("config", "fields")


def _paths(d: dict, prefix: str = ""):
    for k, v in d.items():
        p = f"{prefix}{k}"
        yield p, k, v
        if isinstance(v, dict):
            yield from _paths(v, p + ".")


def aliases(merged: dict[str, Any]) -> dict[str, list[str]]:
    """Flattened key -> the merged-config keys (dotted) that may spell it, of the right type."""
    paths = list(_paths(merged))
    out = {}
    for key, rx in ALIASES.items():
        want = ALIAS_TYPES[key]
        out[key] = [p for p, k, v in paths if re.match(rx, k) and not p.startswith("quantization_config.")
                    and isinstance(v, want) and (want is bool or not isinstance(v, bool))]
    return out


def _fallback(key: str, ck: Checkpoint, say: Remarks) -> FieldRule | None:
    """The rule for an optional key no config key spells: read off the tensors, or assumed."""
    has_markov = any(r.endswith("markov_w1.weight") for r in ck.rel.values())
    if key == "dspark_config.markov_rank" and has_markov:
        w1 = next(ck.headers[n] for n, r in ck.rel.items() if r.endswith("markov_w1.weight"))
        say.comments[FIELDS + (key,)] = "from the markov_w1 shape"
        return FieldRule(default=w1.shape[-1])
    if key == "dspark_config.enable_confidence_head" and any("confidence" in r for r in ck.rel.values()):
        say.comments[FIELDS + (key,)] = "confidence head tensors present"
        return FieldRule(default=True)
    if key == "dspark_config.sample_from_anchor":
        say.comments[FIELDS + (key,)] = say.todo(
            f"no sample_from_anchor/shift_label key: {str(has_markov).lower()} assumed "
            f"({'DSpark' if has_markov else 'DFlash'} default; true drafts B tokens, false B-1)")
        return FieldRule(default=has_markov)
    return None


def fields(ck: Checkpoint, family: GQADFlash, found: dict[str, list[str]], say: Remarks) -> dict[str, FieldRule]:
    """``config.fields``: the intermediate size when the config lacks the plain key, then each
    alias found (required where the family requires it), else a fallback or a TODO."""
    out: dict[str, FieldRule] = {}
    if ck.merged.get("intermediate_size") is None:
        cands = [p for p, k, v in _paths(ck.merged) if re.match(INTERMEDIATE, k) and isinstance(v, int)]
        out["intermediate_size"] = FieldRule(from_=cands, required=True)
        if not cands:
            say.comments[FIELDS + ("intermediate_size",)] = say.todo("no intermediate size key found")
    for key in ALIASES:
        required = key in family.required
        if found[key]:
            out[key] = FieldRule(from_=found[key], required=True) if required else FieldRule(from_=found[key])
        elif required:
            out[key] = FieldRule(from_=[], required=True)
            say.comments[FIELDS + (key,)] = say.todo(f"no config key found for {key}: name it in from")
        elif (rule := _fallback(key, ck, say)) is not None:
            out[key] = rule
    return out


def format_declared(raw: dict[str, Any]) -> dict[str, str]:
    """Keys a checkpoint format declares irrelevant, with the reason: the ``export.markers`` of a
    shipped adapter identify its format; those of them at the top of ``raw`` that the adapter's
    ``config.irrelevant`` lists (speculators' ``speculators_config``, z-lab's ``auto_map``) are
    declared, the reason naming the adapter."""
    out: dict[str, str] = {}
    for name in sorted(adapter_files()):
        spec = load_spec(name)[0]
        markers = spec.export.markers
        if any(k in raw for k in markers):
            for key in markers:
                if key in raw and key in spec.config.irrelevant and key not in out:
                    out[key] = f"{spec.config.irrelevant[key]} (the {name} format declares it)"
    return out


def unplaced(ck: Checkpoint, unread: list[str], say: Remarks) -> tuple[dict[str, Any], dict[str, str]]:
    """Keys no rule reads: those a checkpoint format declares irrelevant (with its reason), every
    other one fixed at the value seen with a TODO, so a config with another value is refused."""
    declared = format_declared(ck.raw)
    irrelevant, fixed = {}, {}
    for key in unread:
        top = key.split(".")[0]
        if top in declared:
            irrelevant[top] = declared[top]
            say.comments[("config", "irrelevant", top)] = "a known checkpoint format's metadata"
        else:
            fixed[key] = get_dotted(ck.merged, key)
            say.comments[("config", "fixed", key)] = say.todo(
                f"{key}: no rule reads it, so fixed at the value seen (another is refused); implement it, or "
                "move it to config.irrelevant with why it changes nothing")
    return fixed, irrelevant


def config(ck: Checkpoint, family: GQADFlash, found: dict[str, list[str]], rules: list[TransformRule],
           say: Remarks) -> ConfigSpec:
    """The ``config`` section: sections, fields, the quantization block dropped, the norm flag
    the transforms implement fixed, and every key no rule reads fixed at its value with a TODO
    (or irrelevant where a checkpoint format declares it so: :func:`unplaced`)."""
    m = ck.merged
    spec = ConfigSpec(sections=ck.sections, fields=fields(ck, family, found, say))
    if ck.sections:
        say.comments[("config", "sections")] = "nested backbone config, merged over the top level"
    if isinstance(m.get("quantization_config"), dict):
        spec.drop = ["quantization_config"]
    if isinstance(m.get("use_gemma_norm"), bool):
        spec.fixed = {"use_gemma_norm": m["use_gemma_norm"]}  # what the norm transforms implement
    dequantized = {get_transform(t.op).quant_method for t in rules} - {None}
    unread = unaccounted(family, spec, dequantized, m)  # compile/keys.py
    fixed, irrelevant = unplaced(ck, unread, say)
    if fixed:
        spec.fixed = {**spec.fixed, **fixed}
    if irrelevant:
        spec.irrelevant = irrelevant
    return spec


def target_layer_ids(ck: Checkpoint, found: dict[str, list[str]], say: Remarks) -> str:
    """``input`` for speculators' ``aux_hidden_state_layer_ids`` (layer inputs), else ``output``."""
    if found["dflash_config.target_layer_ids"][:1] == ["aux_hidden_state_layer_ids"] \
            and "speculators_model_type" in ck.raw:
        say.comments[("target_layer_ids",)] = ("speculators' aux_hidden_state_layer_ids (vLLM eagle convention) "
                                               "name layer inputs")
        return "input"
    say.comments[("target_layer_ids",)] = say.todo("confirm the target layer ids name layer outputs "
                                                   "(z-lab / DSpark: hidden_states[id + 1]); input shifts them by 1")
    return "output"


SMALL = {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
         "vocab_size": 256, "num_hidden_layers": 2, "sliding_window": 8}
SMALL_FFN = ("intermediate_size", "dense_intermediate_size", "ffn_hidden_size", "dspark_ffn_hidden_size")
TINY_LAYERS = 2


def _raw_path(raw: dict, sections: list[str], merged_path: str) -> str:
    """Where a merged-view key lives in the raw config (the first section that has it)."""
    for s in sections:
        if get_dotted(raw[s], merged_path) is not None:
            return f"{s}.{merged_path}"
    return merged_path


def tiny(ck: Checkpoint, found: dict[str, list[str]], ids_input: bool) -> dict[str, Any]:
    """Dotted overrides shrinking the keys found (the backbone's, wherever they live)."""
    raw, sections, m, n = ck.raw, ck.sections, ck.merged, TINY_LAYERS
    out: dict[str, Any] = {}

    def where(key: str) -> list[str]:
        hits = [f"{s}.{key}" for s in sections if key in raw[s]]
        return hits or ([key] if key in raw else [])

    small = {**SMALL, **{k: 256 for k in SMALL_FFN}}
    if isinstance(m.get("rotary_dim"), int):
        small["rotary_dim"] = 16
    if isinstance(m.get("layer_types"), list) and m["layer_types"]:
        small["layer_types"] = list(m["layer_types"][:n]) + [m["layer_types"][-1]] * max(0, n - len(m["layer_types"]))
    if isinstance(m.get("moe_layer_freq"), list):
        small["moe_layer_freq"] = m["moe_layer_freq"][:n]
    for k, v in small.items():
        for p in where(k):
            out[p] = v
    if isinstance(get_dotted(m, "dflash_config.swa_window_size"), int):
        out["dflash_config.swa_window_size"] = 8
    for key, value in (("dflash_config.target_layer_ids", [2, 4, 6] if ids_input else [1, 3, 5]),
                       ("dflash_config.mask_token_id", 250), ("dspark_config.markov_rank", 16)):
        for p in (found.get(key) or [])[:1]:
            out[_raw_path(raw, sections, p)] = value
    return out
