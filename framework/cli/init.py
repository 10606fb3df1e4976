"""``draftsmith init source=DIR out=FILE``: infer a starter adapter spec from a checkpoint.

Reads ``config.json`` and the safetensors headers only (no tensor data) and writes a
commented YAML spec: the family (from the tensor names), the nested config sections, the
common name prefix and the per-layer infix (``layers.{i}.decoder_layer.``) as rename
rules, known renames (``final_norm`` -> ``norm``, bare Markov / confidence names), fused
projections (``qkv_proj``, ``gate_up_proj``) as ``split`` transforms, MXFP8 (F8_E4M3
weights with ``_scale_inv`` / ``_scale`` companions, one scale per 32) as
``dequant_mxfp8``, the norm style (``use_gemma_norm`` or a Gemma ``model_type``), the
window and causality keys, and config aliases for the block size, mask token, target
layer ids and DSpark head keys found in the config. ``synth.config`` is the checkpoint's
own config; ``synth.tiny`` shrinks the keys it found.

The spec is built as an :class:`AdapterSpec`, section by section, and written by
:func:`draftsmith.framework.spec.commented_yaml.dump` with a map of comments by key path.
Every line it could not decide carries a ``# TODO:`` comment saying what to check or
fill in; ``draftsmith inspect adapter=FILE source=DIR`` then shows what is left.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from ..convert.checkpoint import read_config, read_headers
from ..errors import UserError
from ..io.atomic_file import check_file_replaceable, head_has, write_file
from .shown import is_shown_as_is, shown
from ..compile.dotted import get_dotted
from ..compile.family import get_family
from ..compile.flatten import merge_sections
from ..compile.keys import unaccounted
from ...transforms.base import get_transform
from ..spec.commented_yaml import dump
from ..spec.schema import (AdapterSpec, AttentionSpec, ConfigSpec, DocsSpec, FieldRule, MatchSpec, RenameRule,
                           SynthSpec, TransformRule, WeightsSpec)

SECTION_CANDIDATES = ("text_config", "transformer_layer_config", "llm_config", "language_config", "model_config")
LAYER_MODULES = ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")
#: top-level (non-layer) names that mean a target-layout name
KNOWN_RENAMES = {
    "final_norm.weight": "norm.weight",
    "final_layernorm.weight": "norm.weight",
    "norm_f.weight": "norm.weight",
    "ln_f.weight": "norm.weight",
    "markov_w1.weight": "markov_head.markov_w1.weight",
    "markov_w2.weight": "markov_head.markov_w2.weight",
    "confidence_proj.weight": "confidence_head.proj.weight",
    "confidence_proj.bias": "confidence_head.proj.bias",
}
TOP_LEVEL_TARGETS = {
    "fc.weight", "hidden_norm.weight", "norm.weight", "markov_head.markov_w1.weight",
    "markov_head.markov_w2.weight", "confidence_head.proj.weight", "confidence_head.proj.bias",
}
SHARED = ("embed_tokens.weight", "lm_head.weight")
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
_DTYPE_NAMES = {torch.uint8: "uint8", getattr(torch, "float8_e8m0fnu", None): "float8_e8m0fnu"}


@dataclass
class Inferred:
    """What ``init`` decided (and did not)."""

    yaml: str
    todos: list[str] = field(default_factory=list)


def _paths(d: dict, prefix: str = ""):
    for k, v in d.items():
        p = f"{prefix}{k}"
        yield p, k, v
        if isinstance(v, dict):
            yield from _paths(v, p + ".")


def _common_prefix(names: list[str]) -> str:
    parts = [n.split(".") for n in names]
    out = []
    for comps in zip(*parts):
        if len(set(comps)) != 1:
            break
        out.append(comps[0])
    # never swallow a whole name (a single tensor)
    if out and any(len(p) == len(out) for p in parts):
        out = out[:-1]
    return "".join(c + "." for c in out)


def _snake(text: str) -> str:
    s = re.sub(r"(?<!^)(?=[A-Z])", "_", text).lower()
    s = re.sub(r"[^a-z0-9_]+", "_", s).strip("_")
    return s if re.match(r"^[a-z]", s or "") else f"adapter_{s}"


def infer(source: Path, name: str | None = None) -> Inferred:
    """A starter spec for the checkpoint in ``source`` (config.json + headers only)."""
    source = Path(source)
    raw = read_config(source)
    headers = {n: st.meta for n, st in read_headers(source).items()}
    bad = [n for n in headers if not is_shown_as_is(n)]
    if bad:
        raise UserError(*(f"{source}: tensor {shown(n)}: its name holds a control character, format character or "
                          "lone surrogate; init writes only printable names into a spec" for n in bad[:20]))
    todos: list[str] = []
    #: end-of-line comments and whole comment lines after a node, by key path (see commented_yaml)
    comments: dict[tuple, str] = {}
    notes: dict[tuple, list[str]] = {}

    def todo(text: str) -> str:
        todos.append(text)
        return f"TODO: {text}"

    def note(path: tuple, text: str) -> None:
        notes.setdefault(path, []).append(text)

    archs = raw.get("architectures") or []
    name = name or _snake(archs[0] if archs else "new_drafter")

    # ---- config sections and merged view ----
    sections = [s for s in SECTION_CANDIDATES if isinstance(raw.get(s), dict)]
    merged = merge_sections(raw, sections)

    # ---- names ----
    scale_suffixes = ("_scale_inv", "_scale")
    names = sorted(headers)
    prefix = _common_prefix(names)
    rel = {n: n[len(prefix):] for n in names}
    layer_re = re.compile(r"^(?P<container>(?:\w+\.)*?layers)\.(?P<i>\d+)\.(?P<rest>.+)$")
    layer_names = {n: m for n, r in rel.items() if (m := layer_re.match(r))}
    containers = {m.group("container") for m in layer_names.values()}
    infixes = set()
    for m in layer_names.values():
        comps = m.group("rest").split(".")
        k = next((j for j, c in enumerate(comps) if c in LAYER_MODULES), None)
        infixes.add(".".join(comps[:k]) + "." if k else "")
    family_evidence = [t for t in ("fc.weight", "hidden_norm.weight") if any(r == t for r in rel.values())]

    RENAME = ("weights", "rename")
    rename: list[RenameRule] = []

    def rename_rule(rule: RenameRule, comment: str | None = None) -> None:
        if comment:
            comments[RENAME + (len(rename),)] = comment
        rename.append(rule)

    container = next(iter(containers)) if len(containers) == 1 else None
    infix = next(iter(infixes)) if len(infixes) == 1 else None
    if layer_names and (container is None or infix is None):
        note(RENAME, todo(f"per-layer names disagree (containers {sorted(containers)}, infixes {sorted(infixes)}): "
                          "write one template rule per pattern"))
    elif layer_names and (container != "layers" or infix):
        rename_rule(RenameRule(kind="template", match=prefix + container + ".{i}." + infix + "{rest*}",
                               to="layers.{i}.{rest*}"),
                    f"per-layer pattern: {container}.N.{infix or ''}...")
    unmapped = []
    for n, r in rel.items():
        if n in layer_names or any(r.endswith(s) for s in scale_suffixes):
            continue
        if r in KNOWN_RENAMES:
            rename_rule(RenameRule(kind="template", match=n, to=KNOWN_RENAMES[r]))
        elif r not in TOP_LEVEL_TARGETS and r not in SHARED and not r.endswith(SHARED):
            unmapped.append(n)
    layer_targets = {
        "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight",
        "self_attn.k_norm.weight", "self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight",
        *(f"self_attn.{p}_proj.weight" for p in "qkvo"), *(f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")),
    }
    for n, m in layer_names.items():
        rest = m.group("rest")[len(infix or ""):]
        if not any(rest.endswith(s) for s in scale_suffixes) and rest not in layer_targets:
            unmapped.append(n)
    if prefix:
        rename_rule(RenameRule(kind="prefix", match=prefix, to=""), "the common prefix of every tensor name")
    for n in unmapped:
        note(RENAME, f"TODO: no target-layout name for {n} {headers[n]}: add a rename rule (to: null drops it)")
        todos.append(f"unmapped tensor {n}")

    # ---- transforms ----
    TRANSFORMS = ("weights", "transforms")
    transforms: list[TransformRule] = []

    def transform(rule: TransformRule, comment: str | None = None, params_comment: str | None = None) -> tuple:
        path = TRANSFORMS + (len(transforms),)
        if comment:
            comments[path] = comment
        if params_comment:
            comments[path + ("params",)] = params_comment
        transforms.append(rule)
        return path

    fused = {
        "qkv_proj": ("self_attn", ["q_proj", "k_proj", "v_proj"],
                     [["num_attention_heads", "head_dim"], ["num_key_value_heads", "head_dim"],
                      ["num_key_value_heads", "head_dim"]]),
        "gate_up_proj": ("mlp", ["gate_proj", "up_proj"], ["intermediate_size", "intermediate_size"]),
    }
    for fname, (mod, parts, sizes) in fused.items():
        if any(m.group("rest").endswith(f"{mod}.{fname}.weight") for m in layer_names.values()):
            outs = [f"layers.{{i}}.{mod}.{p}.weight" for p in parts]
            rx = "^layers\\.\\d+\\." + mod + "\\." + fname + "\\.weight$"
            inp = f"layers.{{i}}.{mod}.{fname}.weight"
            transform(TransformRule(op="split", match=rx,
                                    params={"input": inp, "outputs": outs, "sizes": sizes, "dim": 0}),
                      f"a fused {fname}, rows in this order", f"TODO: confirm the row order ({', '.join(parts)})")
            todos.append(f"row order of the fused {fname}")

    fp8 = [n for n in names if headers[n].dtype == torch.float8_e4m3fn]
    quant_method = (merged.get("quantization_config") or {}).get("quant_method") if isinstance(
        merged.get("quantization_config"), dict) else None
    if fp8:
        found = {}
        for n in fp8:
            for s in scale_suffixes:
                if n + s in headers:
                    found[n] = s
                    break
        blocks = {
            headers[n].shape[-1] // max(1, headers[n + s].shape[-1]) if headers[n + s].shape[:-1] == headers[n].shape[:-1]
            else None for n, s in found.items()
        }
        scale_dtypes = {headers[n + s].dtype for n, s in found.items()}
        if found and blocks == {32} and scale_dtypes <= set(_DTYPE_NAMES) and len(set(found.values())) == 1:
            mods = sorted({rel[n].removesuffix(".weight").split(".")[-1] for n in found})
            rx = "\\.(" + "|".join(mods) + ")\\.weight$"
            suffix = next(iter(set(found.values())))
            sdt = _DTYPE_NAMES[next(iter(scale_dtypes))]
            path = transform(TransformRule(op="dequant_mxfp8", match=rx,
                                           params={"synth_scale_suffix": suffix, "synth_scale_dtype": sdt}),
                             "F8_E4M3 weights, one scale byte per 32 along the input dim")
            if quant_method not in (None, "mxfp8"):
                note(path, f"TODO: quantization_config.quant_method is {quant_method!r}, the scales look MXFP8")
                todos.append("quant_method vs MXFP8 scales")
            if len(found) != len(fp8):
                note(path, f"TODO: {len(fp8) - len(found)} F8_E4M3 tensors have no scale companion")
                todos.append("F8_E4M3 tensors without scales")
        else:
            note(TRANSFORMS, f"TODO: {len(fp8)} F8_E4M3 tensors whose scales are not MXFP8 (one per 32, "
                             "U8/F8_E8M0): no transform dequantizes them yet")
            todos.append("unsupported FP8 scales")

    gemma = merged.get("use_gemma_norm") is True or "gemma" in str(merged.get("model_type", "")).lower()
    if gemma:
        transform(TransformRule(op="norm_fold_gemma", match=r"^(hidden_norm|layers\.\d+\.self_attn\.k_norm)\.weight$",
                                params={"mode": "fold"}),
                  "TensorRT-LLM runs these plainly: store 1 + w")
        transform(TransformRule(op="norm_fold_gemma",
                                match=r"^(norm|layers\.\d+\.(input_layernorm|post_attention_layernorm|self_attn\.q_norm))\.weight$",
                                params={"mode": "keep"}),
                  "Gemma norms kept as w (engine in Gemma mode)")
    comments[TRANSFORMS] = "norms: " + ("use_gemma_norm / a Gemma model_type: Gemma norms" if gemma
                                        else "no use_gemma_norm or Gemma model_type in the config: plain norms")

    # ---- config fields ----
    FIELDS = ("config", "fields")
    paths = list(_paths(merged))
    fields: dict[str, FieldRule] = {}
    found_alias: dict[str, list[str]] = {}
    for key, rx in ALIASES.items():
        want = ALIAS_TYPES[key]
        cands = [p for p, k, v in paths if re.match(rx, k) and not p.startswith("quantization_config.")
                 and isinstance(v, want) and (want is bool or not isinstance(v, bool))]
        found_alias[key] = cands
    required = {"dflash_config.block_size", "dflash_config.mask_token_id", "dflash_config.target_layer_ids"}
    has_markov = any(r.endswith("markov_w1.weight") for r in rel.values())
    has_conf = any("confidence" in r for r in rel.values())
    if merged.get("intermediate_size") is None:
        cands = [p for p, k, v in paths if re.match(INTERMEDIATE, k) and isinstance(v, int)]
        fields["intermediate_size"] = FieldRule(from_=cands, required=True)
        if not cands:
            comments[FIELDS + ("intermediate_size",)] = todo("no intermediate size key found")
    for key in ALIASES:
        cands = found_alias[key]
        if cands:
            fields[key] = FieldRule(from_=cands, required=True) if key in required else FieldRule(from_=cands)
        elif key in required:
            fields[key] = FieldRule(from_=[], required=True)
            comments[FIELDS + (key,)] = todo(f"no config key found for {key}: name it in from")
        elif key == "dspark_config.markov_rank" and has_markov:
            w1 = next(headers[n] for n, r in rel.items() if r.endswith("markov_w1.weight"))
            fields[key] = FieldRule(default=w1.shape[-1])
            comments[FIELDS + (key,)] = "from the markov_w1 shape"
        elif key == "dspark_config.enable_confidence_head" and has_conf:
            fields[key] = FieldRule(default=True)
            comments[FIELDS + (key,)] = "confidence head tensors present"
        elif key == "dspark_config.sample_from_anchor":
            fields[key] = FieldRule(default=has_markov)
            comments[FIELDS + (key,)] = todo(
                f"no sample_from_anchor/shift_label key: {str(has_markov).lower()} assumed "
                f"({'DSpark' if has_markov else 'DFlash'} default; true drafts B tokens, false B-1)")
    config = ConfigSpec(sections=sections, fields=fields)
    if sections:
        comments[("config", "sections")] = "nested backbone config, merged over the top level"
    if isinstance(merged.get("quantization_config"), dict):
        config.drop = ["quantization_config"]
    if isinstance(merged.get("use_gemma_norm"), bool):
        config.fixed = {"use_gemma_norm": merged["use_gemma_norm"]}  # what the norm transforms above implement
    dequantized = {get_transform(t.op).quant_method for t in transforms} - {None}
    unread = unaccounted(get_family("gqa_dflash"), config, dequantized, merged)  # compile/keys.py
    if unread:
        config.irrelevant = {k: "draftsmith init: no rule reads it" for k in unread}
        comments[("config", "irrelevant")] = todo(f"keys no rule reads ({', '.join(unread)}): confirm each changes "
                                                  "nothing the drafter computes, else the math needs it")

    ids_keys = found_alias["dflash_config.target_layer_ids"]
    if ids_keys[:1] == ["aux_hidden_state_layer_ids"] and "speculators_model_type" in raw:
        target_layer_ids = "input"
        comments[("target_layer_ids",)] = ("speculators' aux_hidden_state_layer_ids (vLLM eagle convention) "
                                           "name layer inputs")
    else:
        target_layer_ids = "output"
        comments[("target_layer_ids",)] = todo("confirm the target layer ids name layer outputs "
                                               "(z-lab / DSpark: hidden_states[id + 1]); input shifts them by 1")

    # ---- attention ----
    layer_types = merged.get("layer_types") or []
    windowed = any(t == "sliding_attention" for t in layer_types) or bool(get_dotted(merged, "dflash_config.use_swa"))
    explicit = [k for k in ("is_causal", "sliding_window_non_causal") if isinstance(merged.get(k), bool)]
    attention = AttentionSpec(windowed_causal=False, full_causal=False)
    if windowed and not explicit:
        comments[("attention", "windowed_causal")] = todo(
            "windowed layers found and no is_causal / sliding_window_non_causal key: confirm they are non-causal")
    else:
        comments[("attention", "windowed_causal")] = (f"from {', '.join(explicit)} in the config" if explicit
                                                      else "no windowed layers")
    comments[("attention", "full_causal")] = "DFlash block attention is non-causal"
    if windowed and merged.get("sliding_window") is None and get_dotted(merged, "dflash_config.swa_window_size") is None:
        attention.window = None
        comments[("attention", "window")] = todo("windowed layers but no sliding_window / swa_window_size: "
                                                 "give the window")

    # ---- tiny overrides for synth ----
    tiny = _tiny(raw, sections, found_alias, target_layer_ids == "input")
    comments[("synth", "config")] = "this checkpoint's own config.json"
    comments[("synth", "tiny")] = ("small dims for scale=tiny; check every key" if tiny
                                   else todo("dotted-key overrides that make a small checkpoint"))

    # ---- assemble ----
    if family_evidence:
        comments[("family",)] = f"tensors {', '.join(family_evidence)} and per-layer self_attn/mlp"
    else:
        comments[("family",)] = todo("no fc / hidden_norm tensors: is this a DFlash-family drafter?")
    comments[("description",)] = todo("one line about the drafter")
    if archs:
        match = MatchSpec(architectures=archs)
    else:  # not a valid spec yet: the TODO asks for it
        match = MatchSpec.model_construct(architectures=[])
        comments[("match", "architectures")] = todo("the config has no architectures")
    if raw.get("model_type"):
        match.model_type = raw["model_type"]
    comments[("docs", "model")] = todo("the model name shown in the docs table")
    comments[("docs", "example_checkpoint")] = todo("a hub id or path users know")
    spec = AdapterSpec(
        name=name, family="gqa_dflash", description="drafter with architectures " + ", ".join(archs),
        match=match, config=config, weights=WeightsSpec(rename=rename, transforms=transforms),
        attention=attention, target_layer_ids=target_layer_ids,
        docs=DocsSpec(model=archs[0] if archs else name, example_checkpoint=str(source)),
        synth=SynthSpec(config=raw, tiny=tiny),
    )
    header = [
        "yaml-language-server: $schema=../docs/adapter-spec.schema.json",
        f"{INIT_MARK.removeprefix('# ')} source={source}`; check every TODO, then run",
        f"`draftsmith inspect adapter=<this file> source={source}`.",
    ]
    return Inferred(dump(spec, header, comments, notes), todos)


def _tiny(raw: dict, sections: list[str], aliases: dict[str, list[str]], ids_input: bool) -> dict[str, Any]:
    """Dotted overrides shrinking the keys found (the backbone's, wherever they live)."""
    small = {
        "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "vocab_size": 256, "num_hidden_layers": 2, "sliding_window": 8,
    }
    out: dict[str, Any] = {}

    def where(key: str) -> list[str]:
        hits = [f"{s}.{key}" for s in sections if key in raw[s]]
        return hits or ([key] if key in raw else [])

    merged = merge_sections(raw, sections)
    for k, v in small.items():
        for p in where(k):
            out[p] = v
    for k in ("intermediate_size", "dense_intermediate_size", "ffn_hidden_size", "dspark_ffn_hidden_size"):
        for p in where(k):
            out[p] = 256
    if isinstance(merged.get("rotary_dim"), int):
        for p in where("rotary_dim"):
            out[p] = 16
    n = 2
    if isinstance(merged.get("layer_types"), list) and merged["layer_types"]:
        for p in where("layer_types"):
            out[p] = list(merged["layer_types"][:n]) + [merged["layer_types"][-1]] * max(0, n - len(merged["layer_types"]))
    for k in ("moe_layer_freq",):
        if isinstance(merged.get(k), list):
            for p in where(k):
                out[p] = merged[k][:n]
    if isinstance(get_dotted(merged, "dflash_config.swa_window_size"), int):
        out["dflash_config.swa_window_size"] = 8
    ids = aliases.get("dflash_config.target_layer_ids") or []
    mask = aliases.get("dflash_config.mask_token_id") or []
    rank = aliases.get("dspark_config.markov_rank") or []
    for p in ids[:1]:
        out[_raw_path(raw, sections, p)] = [2, 4, 6] if ids_input else [1, 3, 5]
    for p in mask[:1]:
        out[_raw_path(raw, sections, p)] = 250
    for p in rank[:1]:
        out[_raw_path(raw, sections, p)] = 16
    return out


def _raw_path(raw: dict, sections: list[str], merged_path: str) -> str:
    """Where a merged-view key lives in the raw config (the first section that has it)."""
    for s in sections:
        if get_dotted(raw[s], merged_path) is not None:
            return f"{s}.{merged_path}"
    return merged_path


INIT_MARK = "# Starter spec written by `draftsmith init"


def _written_by_init(path: Path) -> bool:
    """``path`` is a regular file whose first lines carry init's header."""
    return head_has(path, INIT_MARK.encode("utf-8"))


def cli(opts: dict) -> int:
    source = opts.get("source")
    out = opts.get("out")
    if not source:
        raise UserError("draftsmith init: missing source=...")
    if not out:
        raise UserError("draftsmith init: missing out=FILE (the adapter YAML to write)")
    out = Path(out)
    if os.path.lexists(out):  # refused before reading the source; checked again when written
        check_file_replaceable(out, "out", bool(opts.get("overwrite")), "init", _written_by_init)
    if out.suffix != ".yaml":
        raise UserError(f"out={out}: an adapter file ends in .yaml")
    name = out.stem
    if not re.match(r"^[a-z][a-z0-9_]*$", name):
        raise UserError(f"out={out}: the file name is the adapter name: lowercase letters, digits, _")
    try:
        res = infer(Path(source), name)
    except yaml.YAMLError as e:  # a config string YAML cannot carry (control characters): one line
        raise UserError(f"source={source}: config.json holds a value a spec cannot carry "
                        f"({shown(str(e).splitlines()[0] if str(e) else type(e).__name__)})") from None
    write_file(out, res.yaml.encode("utf-8"), key="out", command="init", overwrite=bool(opts.get("overwrite")),
               owned=_written_by_init)
    print(f"wrote {out} ({len(res.todos)} TODO{'s' if len(res.todos) != 1 else ''})")
    for t in res.todos:
        print(f"  TODO: {t}")
    print(f"next: draftsmith inspect adapter={out} source={source}")
    return 0
