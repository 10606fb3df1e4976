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

Every line it could not decide carries a ``# TODO:`` comment saying what to check or
fill in; ``draftsmith inspect adapter=FILE source=DIR`` then shows what is left.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from .checkpoint import read_config, read_headers
from .errors import UserError
from .family import get_dotted
from .flatten import merge_sections

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


def _q(v: Any) -> str:
    """A YAML flow scalar/collection (JSON is valid YAML)."""
    return json.dumps(v)


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
    todos: list[str] = []
    L: list[str] = []

    def todo(text: str) -> str:
        todos.append(text)
        return f"  # TODO: {text}"

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

    rename: list[str] = []
    container = next(iter(containers)) if len(containers) == 1 else None
    infix = next(iter(infixes)) if len(infixes) == 1 else None
    if layer_names and (container is None or infix is None):
        rename.append(todo(f"per-layer names disagree (containers {sorted(containers)}, infixes {sorted(infixes)}): "
                           "write one template rule per pattern"))
    elif layer_names and (container != "layers" or infix):
        rename.append(f'    - {{kind: template, match: {_q(prefix + container + ".{i}." + infix + "{rest*}")}, '
                      f'to: "layers.{{i}}.{{rest*}}"}}  # per-layer pattern: {container}.N.{infix or ""}...')
    unmapped = []
    for n, r in rel.items():
        if n in layer_names or any(r.endswith(s) for s in scale_suffixes):
            continue
        if r in KNOWN_RENAMES:
            rename.append(f"    - {{kind: template, match: {_q(n)}, to: {_q(KNOWN_RENAMES[r])}}}")
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
        rename.append(f'    - {{kind: prefix, match: {_q(prefix)}, to: ""}}  # the common prefix of every tensor name')
    for n in unmapped:
        rename.append(f"    # TODO: no target-layout name for {n} {headers[n]}: add a rename rule (to: null drops it)")
        todos.append(f"unmapped tensor {n}")

    # ---- transforms ----
    transforms: list[str] = []
    targets_rel = set(rel.values())
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
            transforms.append(f"    - op: split  # a fused {fname}, rows in this order")
            transforms.append(f"      match: {_q(rx)}")
            transforms.append(f"      params: {{input: {_q(inp)}, outputs: {_q(outs)}, "
                              f"sizes: {_q(sizes)}, dim: 0}}  # TODO: confirm the row order ({', '.join(parts)})")
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
            transforms.append("    - op: dequant_mxfp8  # F8_E4M3 weights, one scale byte per 32 along the input dim")
            transforms.append(f"      match: {_q(rx)}")
            transforms.append(f"      params: {{synth_scale_suffix: {suffix}, synth_scale_dtype: {sdt}}}")
            if quant_method not in (None, "mxfp8"):
                transforms.append(f"      # TODO: quantization_config.quant_method is {quant_method!r}, the scales look MXFP8")
                todos.append("quant_method vs MXFP8 scales")
            if len(found) != len(fp8):
                transforms.append(f"      # TODO: {len(fp8) - len(found)} F8_E4M3 tensors have no scale companion")
                todos.append("F8_E4M3 tensors without scales")
        else:
            transforms.append(f"    # TODO: {len(fp8)} F8_E4M3 tensors whose scales are not MXFP8 (one per 32, "
                              "U8/F8_E8M0): no transform dequantizes them yet")
            todos.append("unsupported FP8 scales")

    gemma = merged.get("use_gemma_norm") is True or "gemma" in str(merged.get("model_type", "")).lower()
    if gemma:
        transforms.append("    - op: norm_fold_gemma  # TensorRT-LLM runs these plainly: store 1 + w")
        transforms.append(r"      match: '^(hidden_norm|layers\.\d+\.self_attn\.k_norm)\.weight$'")
        transforms.append("      params: {mode: fold}")
        transforms.append("    - op: norm_fold_gemma  # Gemma norms kept as w (engine in Gemma mode)")
        transforms.append(r"      match: '^(norm|layers\.\d+\.(input_layernorm|post_attention_layernorm|self_attn\.q_norm))\.weight$'")
        transforms.append("      params: {mode: keep}")
    norm_note = ("use_gemma_norm / a Gemma model_type: Gemma norms" if gemma
                 else "no use_gemma_norm or Gemma model_type in the config: plain norms")

    # ---- config fields ----
    paths = list(_paths(merged))
    fields: list[str] = []
    found_alias: dict[str, list[str]] = {}
    for key, rx in ALIASES.items():
        want = ALIAS_TYPES[key]
        cands = [p for p, k, v in paths if re.match(rx, k) and not p.startswith("quantization_config.")
                 and isinstance(v, want) and (want is bool or not isinstance(v, bool))]
        found_alias[key] = cands
    required = {"dflash_config.block_size", "dflash_config.mask_token_id", "dflash_config.target_layer_ids"}
    has_markov = any(r.endswith("markov_w1.weight") for r in rel.values())
    has_conf = any("confidence" in r for r in rel.values())
    for key in ALIASES:
        cands = found_alias[key]
        if cands:
            fields.append(f"    {key}: {{from: {_q(cands)}{', required: true' if key in required else ''}}}")
        elif key in required:
            fields.append(f"    {key}: {{from: [], required: true}}" + todo(f"no config key found for {key}: name it in from"))
        elif key == "dspark_config.markov_rank" and has_markov:
            w1 = next(headers[n] for n, r in rel.items() if r.endswith("markov_w1.weight"))
            fields.append(f"    {key}: {{default: {w1.shape[-1]}}}  # from the markov_w1 shape")
        elif key == "dspark_config.enable_confidence_head" and has_conf:
            fields.append(f"    {key}: {{default: true}}  # confidence head tensors present")
        elif key == "dspark_config.sample_from_anchor":
            dflt = "true" if has_markov else "false"
            fields.append(f"    {key}: {{default: {dflt}}}"
                          + todo(f"no sample_from_anchor/shift_label key: {dflt} assumed "
                                 f"({'DSpark' if has_markov else 'DFlash'} default; true drafts B tokens, false B-1)"))
    if merged.get("intermediate_size") is None:
        cands = [p for p, k, v in paths if re.match(INTERMEDIATE, k) and isinstance(v, int)]
        if cands:
            fields.insert(0, f"    intermediate_size: {{from: {_q(cands)}, required: true}}")
        else:
            fields.insert(0, "    intermediate_size: {from: [], required: true}" + todo("no intermediate size key found"))
    drop = ["quantization_config"] if isinstance(merged.get("quantization_config"), dict) else []

    ids_keys = found_alias["dflash_config.target_layer_ids"]
    if ids_keys[:1] == ["aux_hidden_state_layer_ids"] and "speculators_model_type" in raw:
        tli = "target_layer_ids: input  # speculators' aux_hidden_state_layer_ids (vLLM eagle convention) name layer inputs"
    else:
        tli = ("target_layer_ids: output" + todo("confirm the target layer ids name layer outputs "
                                                 "(z-lab / DSpark: hidden_states[id + 1]); input shifts them by 1"))

    # ---- attention ----
    layer_types = merged.get("layer_types") or []
    windowed = any(t == "sliding_attention" for t in layer_types) or bool(get_dotted(merged, "dflash_config.use_swa"))
    explicit = [k for k in ("is_causal", "sliding_window_non_causal") if isinstance(merged.get(k), bool)]
    att = ["attention:"]
    if windowed and not explicit:
        att.append("  windowed_causal: false" + todo("windowed layers found and no is_causal / "
                                                     "sliding_window_non_causal key: confirm they are non-causal"))
    else:
        note = f"from {', '.join(explicit)} in the config" if explicit else "no windowed layers"
        att.append(f"  windowed_causal: false  # {note}")
    att.append("  full_causal: false  # DFlash block attention is non-causal")
    if windowed and merged.get("sliding_window") is None and get_dotted(merged, "dflash_config.swa_window_size") is None:
        att.append("  window: null" + todo("windowed layers but no sliding_window / swa_window_size: give the window"))

    # ---- tiny overrides for synth ----
    tiny = _tiny(raw, sections, found_alias, tli.startswith("target_layer_ids: input"))

    # ---- assemble ----
    fam = "gqa_dflash"
    fam_note = (f"tensors {', '.join(family_evidence)} and per-layer self_attn/mlp" if family_evidence
                else None)
    L.append("# yaml-language-server: $schema=../docs/adapter-spec.schema.json")
    L.append(f"{INIT_MARK} source={source}`; check every TODO, then run")
    L.append(f"# `draftsmith inspect adapter=<this file> source={source}`.")
    L.append(f"name: {name}")
    L.append(f"family: {fam}" + (f"  # {fam_note}" if fam_note else todo("no fc / hidden_norm tensors: is this a DFlash-family drafter?")))
    L.append(f"description: {_q('drafter with architectures ' + ', '.join(archs))}" + todo("one line about the drafter"))
    L.append("")
    L.append("match:")
    L.append(f"  architectures: {_q(archs)}" + ("" if archs else todo("the config has no architectures")))
    if raw.get("model_type"):
        L.append(f"  model_type: {_q(raw['model_type'])}")
    L.append("")
    L.append("config:")
    L.append(f"  sections: {_q(sections)}" + ("  # nested backbone config, merged over the top level" if sections else ""))
    L.append("  fields:")
    L.extend(fields or ["    {}"])
    if drop:
        L.append(f"  drop: {_q(drop)}")
    L.append("")
    L.append("weights:")
    L.append("  rename:" + ("" if any(l.lstrip().startswith("- ") for l in rename) else " []"))
    L.extend(rename)
    L.append("  transforms:" + ("" if any(l.lstrip().startswith("- ") for l in transforms) else " []")
             + f"  # norms: {norm_note}")
    L.extend(transforms)
    L.append("")
    L.extend(att)
    L.append("")
    L.append(tli)
    L.append("")
    L.append("docs:")
    L.append(f"  model: {_q(archs[0] if archs else name)}" + todo("the model name shown in the docs table"))
    L.append(f"  example_checkpoint: {_q(str(source))}" + todo("a hub id or path users know"))
    L.append("")
    L.append("synth:")
    L.append("  config:  # this checkpoint's own config.json")
    L.append(_indent(yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=100), 4))
    if tiny:
        L.append("  tiny:" + "  # small dims for scale=tiny; check every key")
        L.extend(f"    {k}: {_q(v)}" for k, v in tiny.items())
    else:
        L.append("  tiny: {}" + todo("dotted-key overrides that make a small checkpoint"))
    return Inferred("\n".join(L).rstrip() + "\n", todos)


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line if line else line for line in text.rstrip().splitlines())


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
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as f:
        head = f.read(4096).decode("utf-8", "replace").splitlines()[:3]
    return any(l.startswith(INIT_MARK) for l in head)


def cli(opts: dict) -> int:
    source = opts.get("source")
    out = opts.get("out")
    if not source:
        raise UserError("draftsmith init: missing source=...")
    if not out:
        raise UserError("draftsmith init: missing out=FILE (the adapter YAML to write)")
    out = Path(out)
    if os.path.lexists(out):
        if not opts.get("overwrite"):
            raise UserError(f"out={out}: already exists (pass overwrite=true to replace it)")
        if not _written_by_init(out):
            raise UserError(f"out={out}: exists and was not written by draftsmith init; "
                            "overwrite=true replaces only specs init wrote: choose another out=")
    if out.suffix != ".yaml":
        raise UserError(f"out={out}: an adapter file ends in .yaml")
    name = out.stem
    if not re.match(r"^[a-z][a-z0-9_]*$", name):
        raise UserError(f"out={out}: the file name is the adapter name: lowercase letters, digits, _")
    res = infer(Path(source), name)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    tmp.write_text(res.yaml)
    os.replace(tmp, out)
    print(f"wrote {out} ({len(res.todos)} TODO{'s' if len(res.todos) != 1 else ''})")
    for t in res.todos:
        print(f"  TODO: {t}")
    print(f"next: draftsmith inspect adapter={out} source={source}")
    return 0
