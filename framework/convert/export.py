"""Export: write a checkpoint in another adapter's *source* format (``convert ... to=NAME``).

The source checkpoint is converted into the family target layout first (the ordinary
plan, streamed into a temp dir); then the *target* adapter runs backwards, as ``synth``
does: its transforms' inverses (``split`` <- ``fuse``, quantization, norm folding) and its
rename rules' inverses, group by group. ``to=`` names an adapter or an ``export.alias``
(:func:`resolve_target`): of the adapters sharing an alias, the one whose family is the
drafter's and whose ``export.with_heads`` fits (``to=speculators``: speculators' DFlash, DSpark
or DFlash 2 format); none fitting is refused in one line.

The config is an inverse of :func:`~.flatten.flatten`, derived from the flattened config:

- every ``config.fields`` rule of the target adapter writes its value back under its
  **first** ``from`` alias (a rule without aliases cannot carry a value: the value must
  then equal the rule's default);
- ``target_layer_ids: input`` adapters get each id plus 1;
- the resolved attention table is written back as ``is_causal`` (the causality of the
  full-attention layers, or of all layers) and ``sliding_window_non_causal`` (that of the
  windowed layers) besides ``layer_types`` / ``sliding_window`` / ``use_sliding_window``
  (HF's switch for windows, e.g. ``Qwen3Config``); per-layer causality
  that differs inside one kind cannot be written;
- every other key the family reads is carried over (see below). Keys go where the target adapter's ``synth.config`` template has them (top
  level and/or a ``config.sections`` section); keys the template lacks go into its first
  section when it has one (the backbone), else to the top level;
- format descriptors the flattened config lacks are copied from the template: strings
  and mappings (``model_type``, ``auto_map``, ``quantization_config``,
  ``speculators_config``, ...), never numbers or lists; ``architectures`` (and
  ``model_type`` where ``match`` fixes one) come from the target's ``match``. The source's
  ``model_type`` and every adapter's ``export.markers`` (``speculators_model_type``,
  ``auto_map``, ...) are not carried: they name the source format;
- the target's ``export.derived`` keys are then set from the drafter, never from the
  template: the draft vocabulary, ``max_draft_len`` (speculators' ``speculative_tokens``),
  the target layer count, the verifier (``verifier=``, else the source config's value at
  the same key; refused when neither);
- a drafter of another family than the target's, or with a feature in the target's
  ``export.unsupported`` (the clamped SwiGLU, partial rotary, causal windows, Markov/confidence
  heads, layers of differing causality), refuses the export in one line; what the serving
  engines' own readers would run is checked by tests/test_crosscheck_readers_*.py (DFlash 2:
  tests/upstream/readers/test_export_dflash2.py).

Norm styles: a norm the source runs Gemma style (``rms(x) * (1 + w)``) but the target
adapter reads plainly is stored as ``bf16(1 + float32(w))`` (rounded once), and the
reverse as ``bf16(float32(w) - 1)``; every other tensor is exact where the target's
inverse transforms are (not for a re-quantization such as MXFP8).

Only the keys the family reads are carried (:func:`family_view`), plus the target spec's
``config.fixed`` values; keys only the source format's runtime reads (``use_gemma_norm``,
``qk_norm_type``, ...) are left behind, so the target's reader never applies them to
tensors re-stored for it (a ``use_gemma_norm: true`` beside norms stored as ``1 + w`` would
make SGLang add 1 twice). A value scale (``dflash_config.attention_value_scale``) is folded
into every ``o_proj`` (:func:`fold_value_scale`) and not written: no target format's own
runtime reads it. A draft vocabulary smaller than the target's (speculators' ``t2d`` /
``d2t``) is not produced.

The result is checked before anything is written: the target adapter must route the
written config to itself and flatten it back to the same values (shapes, block size, mask
token, target layer ids, heads, per-layer windows and causality, ``max_draft_len``), else
the export is refused with the keys that differ, one line each: ``KEY: VALUE would read back as
DEFAULT`` for a value the target format has no key for (DFlash 2's ``output_multiplier``,
``final_logit_softcapping``, ``input_embedding_scale`` in speculators' format, whose selector scores
raw logits; a ``selector_chain`` other than the one its runtime walks). The borrowed
``embed_tokens`` / ``lm_head`` are not written (the drafter does not hold them).
"""

from __future__ import annotations

import copy
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Sequence

import torch
from tqdm import tqdm
from safetensors import safe_open

from ...lowering.base import MaskSpec
from ...transforms.base import Context
from ...transforms.names import NameTemplate
from ...transforms.norm_fold import fold_gemma, unfold_gemma
from ..compile.adapter import Adapter, load_adapter
from ..compile.converted_config import compile_config
from ..compile.family import get_family
from ..compile.keys import VALUE_SCALE
from ..compile.resolved import ResolvedDrafter
from ..errors import UserError
from ..io.publish import atomic_dir, publish, remove_temp
from ..io.scratch import make_scratch
from ..spec.loading import adapter_files
from .checkpoint import read_config, read_headers
from .execute import execute
from .plan import plan as conversion_plan
from .synth import _groups, inverse_apps, run_inverse
from .writer import ShardedSaver
from ..compile.dotted import get_dotted, pop_dotted, set_dotted
from ..spec.overrides import reach

#: keys export rewrites (identity, or the attention table, compared per layer instead)
_REWRITTEN = ("architectures", "model_type", "draftsmith", "is_causal", "sliding_window_non_causal",
              "use_sliding_window")
_O_PROJ = NameTemplate("layers.{i}.self_attn.o_proj.weight")


def _all_adapters(adapter_dir=None) -> list:
    return [load_adapter(n, adapter_dir=adapter_dir) for n in sorted(adapter_files(adapter_dir))]


def _fits(a: Adapter) -> str:
    """What adapter ``a`` takes under its alias: ``NAME: FAMILY[ with[out] heads]``."""
    h = a.spec.export.with_heads
    return f"{a.name}: {a.family.name}" + ("" if h is None else " with heads" if h else " without heads")


def resolve_target(to: str, r: ResolvedDrafter, adapter_dir=None, adapters: Sequence | None = None):
    """The adapter ``to`` names for drafter ``r``: an adapter name, or an ``export.alias``. Of the
    adapters sharing an alias, the one whose family is the drafter's and whose ``export.with_heads``
    (unset: either) says whether the drafter has a Markov or confidence head; refused in one line
    when none or several fit (``adapters``: every adapter, when the caller has loaded them)."""
    files = adapter_files(adapter_dir)
    if to in files:
        return load_adapter(to, adapter_dir=adapter_dir)
    adapters = _all_adapters(adapter_dir) if adapters is None else adapters
    named = [a for a in adapters if a.spec.export.alias == to]
    if not named:
        aliases = sorted({a.spec.export.alias for a in adapters if a.spec.export.alias})
        raise UserError(f"to={to}: not an adapter name; known: dflash, {', '.join(aliases)}, {', '.join(sorted(files))}")
    heads = bool(r.heads.markov_rank) or r.heads.confidence
    picked = [a for a in named if a.family.name == r.family and a.spec.export.with_heads in (None, heads)]
    if not picked:
        raise UserError(f"to={to}: no format under this alias fits a {r.family} drafter "
                        f"{'with' if heads else 'without'} heads ({'; '.join(_fits(a) for a in named)})")
    if len(picked) > 1:
        raise UserError(f"to={to}: names {', '.join(a.name for a in picked)}; set export.with_heads")
    return picked[0]


# ---- config -------------------------------------------------------------------------------------


def _attention_keys(cfg: dict, masks: Sequence[MaskSpec],
                    keys: Sequence[str] = ("is_causal", "sliding_window_non_causal")) -> None:
    """Write the resolved per-layer causality back as explicit keys (in place), only those of
    ``keys`` (the target's ``export.causality_keys``)."""
    win = {m.causal for m in masks if m.window is not None}
    full = {m.causal for m in masks if m.window is None}
    cfg.pop("is_causal", None)
    cfg.pop("sliding_window_non_causal", None)
    if len(full) == 1:
        cfg["is_causal"] = full.pop()
    elif not full and len(win) == 1:
        cfg["is_causal"] = next(iter(win))
    if len(win) == 1:
        cfg["sliding_window_non_causal"] = not win.pop()
    for k in ("is_causal", "sliding_window_non_causal"):
        if k not in keys:
            cfg.pop(k, None)
    cfg["use_sliding_window"] = any(m.window is not None for m in masks)


def _template_descriptors(value: Any) -> bool:
    return isinstance(value, (str, dict))


#: ``export.unsupported`` feature -> whether drafter ``r`` uses it, and how to say so
_FEATURES = {
    "swiglu_oai": (lambda r: r.mlp.kind == "swiglu_oai", lambda r: "the clamped SwiGLU MLP (hidden_act swigluoai)"),
    "partial_rotary": (lambda r: r.dims.rotary_dim < r.dims.head_dim,
                       lambda r: f"partial rotary (rotary_dim {r.dims.rotary_dim} of head_dim {r.dims.head_dim})"),
    "causal_windows": (lambda r: any(m.causal and m.window is not None for m in r.masks),
                       lambda r: "causal sliding-window layers"),
    "heads": (lambda r: bool(r.heads.markov_rank) or r.heads.confidence,
              lambda r: f"the Markov (rank {r.heads.markov_rank}) / confidence ({r.heads.confidence}) heads"),
    "mlp_bias": (lambda r: r.mlp_bias, lambda r: "MLP biases (mlp_bias: true)"),
    "mixed_causality": (lambda r: len({m.causal for m in r.masks}) > 1,
                        lambda r: "layers of differing causality (causal: "
                                  f"{[m.causal for m in r.masks]}; vLLM 0.33's speculators reader, "
                                  "transformers_utils/configs/speculators/algos.py, applies one to every layer)"),
    "target_hidden": (lambda r: r.dims.target_hidden != r.dims.hidden,
                      lambda r: f"a target hidden size ({r.dims.target_hidden}) other than the drafter's "
                                f"hidden size ({r.dims.hidden})"),
    "conv_over_block": (lambda r: r.dflash2 is not None and r.dflash2.conv.kernel_size > r.block_size,
                        lambda r: f"dflash_config.conv_kernel_size {r.dflash2.conv.kernel_size} larger than "
                                  f"block_size {r.block_size} (its loader: kernel_size cannot exceed block_size)"),
}


def refuse_unsupported(target: Adapter, r: ResolvedDrafter) -> None:
    """One line naming the first drafter feature ``target``'s format cannot run (first: a drafter of
    another family, e.g. DFlash 2's convolutions and selector in a DFlash format)."""
    if r.family != target.family.name:
        raise UserError(f"to={target.name}: the {target.name} format cannot express a {r.family} drafter "
                        f"({get_family(r.family).description}; the format's family is {target.family.name})")
    for feature in target.spec.export.unsupported:
        used, say = _FEATURES[feature]
        if used(r):
            raise UserError(f"to={target.name}: the {target.name} format cannot express {say(r)} "
                            f"(export.unsupported: {feature})")


def all_markers(adapter_dir=None, adapters: Sequence | None = None) -> set[str]:
    """Every adapter's ``export.markers``: keys naming a source format (``adapters``: every
    adapter, when the caller has loaded them)."""
    return {m for a in (_all_adapters(adapter_dir) if adapters is None else adapters) for m in a.spec.export.markers}


def _set_path(d: Any, key: str, value: Any, where: str) -> None:
    """Set dotted ``key`` in ``d``; an integer part indexes an existing list."""
    parts = key.split(".")
    for part in parts[:-1]:
        if isinstance(d, list):
            if not part.isdigit() or int(part) >= len(d):
                raise UserError(f"{where}: export.derived key {key}: {part} does not index the template's list")
            d = d[int(part)]
        else:
            if not isinstance(d.get(part), (dict, list)):
                d[part] = {}
            d = d[part]
    last = parts[-1]
    if isinstance(d, list):
        if not last.isdigit() or int(last) >= len(d):
            raise UserError(f"{where}: export.derived key {key}: {last} does not index the template's list")
        d[int(last)] = value
    else:
        d[last] = value


def _get_path(d: Any, key: str) -> Any:
    """The value at dotted ``key`` (a digit step indexes a list), ``None`` where a step is missing."""
    steps = [int(p) if p.isdigit() else p for p in key.split(".")]
    value, found = reach(d, steps)
    return value if found == len(steps) else None


def derived_values(target: Adapter, flat: dict, r: ResolvedDrafter, source_raw: dict | None,
                   verifier: str | None) -> dict[str, Any]:
    """The target's ``export.derived`` keys -> values from the drafter (flattened config ``flat``,
    its record ``r``) / the user / the source."""
    out: dict[str, Any] = {}
    for key, what in target.spec.export.derived.items():
        if what == "draft_vocab_size":
            out[key] = r.dims.vocab
        elif what == "max_draft_len":
            out[key] = r.max_draft_len
        elif what == "num_target_layers":
            n = flat.get("num_target_layers")
            out[key] = n if isinstance(n, int) and n > max(r.target_layer_ids) else max(r.target_layer_ids) + 1
        elif what == "verifier":
            v = verifier or _get_path(source_raw or {}, key)
            if not isinstance(v, str) or not v:
                raise UserError(f"to={target.name}: the {target.name} format records the verifier ({key}); "
                                f"pass verifier=MODEL_ID_OR_PATH")
            out[key] = v
        elif what == "verifier_architectures":
            v = _get_path(source_raw or {}, key)
            out[key] = list(v) if isinstance(v, list) else []
    return out


def source_config_from_flat(target: Adapter, flat: dict[str, Any], r: ResolvedDrafter, source_raw: dict | None = None,
                            verifier: str | None = None, markers: set[str] | frozenset = frozenset()) -> dict[str, Any]:
    """The raw ``config.json`` of ``target``'s source format for flattened config ``flat`` and
    its record ``r`` (``source_raw``: the source's own config.json, for the verifier;
    ``markers``: format markers never carried over)."""
    spec = target.spec
    refuse_unsupported(target, r)
    derived = derived_values(target, flat, r, source_raw, verifier)
    cfg = family_view(target.family, flat)
    pop_dotted(cfg, VALUE_SCALE)  # folded into o_proj by the export (no target format's runtime reads it)
    for key, value in {**target.family.fixed, **spec.config.fixed}.items():  # values the target's math hard-codes
        set_dotted(cfg, key, copy.deepcopy(value))
    _attention_keys(cfg, r.masks, spec.export.causality_keys)
    dc = cfg.setdefault("dflash_config", {})
    if spec.target_layer_ids == "input":
        dc["target_layer_ids"] = [i + 1 for i in dc["target_layer_ids"]]

    alias_heads: set[str] = set()
    for key, rule in spec.config.fields.items():
        alias_heads.update(a.split(".")[0] for a in rule.from_)
        value = get_dotted(cfg, key)
        pop_dotted(cfg, key)
        if value is not None and rule.from_:
            set_dotted(cfg, rule.from_[0], value)
    for k in [k for k, v in cfg.items() if v == {}]:
        del cfg[k]

    template = copy.deepcopy(spec.synth.config)
    sections = [s for s in spec.config.sections if isinstance(template.get(s), dict)]
    raw: dict[str, Any] = {}
    for k, v in cfg.items():
        placed = False
        if k in template and k not in sections:
            raw[k] = copy.deepcopy(v)
            placed = True
        for s in sections:
            if k in template[s]:
                raw.setdefault(s, {})[k] = copy.deepcopy(v)
                placed = True
        if not placed:
            (raw.setdefault(sections[0], {}) if sections else raw)[k] = copy.deepcopy(v)

    skip = alias_heads | set(spec.config.dtype_keys) | set(spec.config.sections)
    for k, v in template.items():
        if k in sections:
            for k2, v2 in v.items():
                if k2 not in raw.get(k, {}) and k2 not in skip and _template_descriptors(v2):
                    raw.setdefault(k, {})[k2] = copy.deepcopy(v2)
        elif k not in raw and k not in skip and _template_descriptors(v):
            raw[k] = copy.deepcopy(v)
    raw["architectures"] = [spec.match.architectures[0]]
    if spec.match.model_type is not None:
        raw["model_type"] = spec.match.model_type
    for key, value in derived.items():
        _set_path(raw, key, value, f"{target.path}")
    return raw


#: family keys an export never writes: TensorRT-LLM's mirror of sample_from_anchor, written
#: back under the target's own alias (``config.fields``) when it has one
_NOT_EXPORTED = ("dspark_config.shift_label",)


def family_view(family, flat: dict[str, Any]) -> dict[str, Any]:
    """The keys of flattened config ``flat`` that the family reads (``family.consumes``) or
    carries (``family.carried``), plus ``torch_dtype``: all an export carries. Keys only the source format's runtime reads
    (``use_gemma_norm``, ``qk_norm_type``, ...) are left behind, so a reader of the target format
    never applies them to tensors already re-stored for it."""
    out: dict[str, Any] = {}
    for key in (*family.consumes, *family.carried, "torch_dtype"):
        v = get_dotted(flat, key)
        if v is not None and key not in _NOT_EXPORTED:
            set_dotted(out, key, copy.deepcopy(v))
    return out


def _compare(flat: dict, back: dict, drop: list[str], prefix: str = "") -> list[str]:
    out = []
    for k, v in flat.items():
        key = prefix + k
        if key in _REWRITTEN or key in drop:
            continue
        if isinstance(v, dict) and isinstance(back.get(k), dict):
            out += _compare(v, back[k], drop, key + ".")
        elif back.get(k) != v:
            out.append(f"{key}: {v!r} would read back as {back.get(k)!r}")
    return out


def check_config(target: Adapter, flat: dict, ours: ResolvedDrafter, raw: dict, markers=frozenset()) -> dict:
    """Flatten ``raw`` with ``target``; refuse when it does not read back as ``flat`` (record
    ``ours``; format ``markers`` and the target's derived keys excepted: they are the target
    format's own)."""
    if not target.matches(raw):
        raise UserError(f"to={target.name}: the written config would not route to {target.name}")
    back, theirs = compile_config(target, raw, where=f"{target.name} config (export)")
    skip = [*target.spec.config.drop, *markers, *target.spec.export.markers, *target.spec.export.derived]
    problems = _compare(family_view(target.family, flat), family_view(target.family, back), [*skip, VALUE_SCALE])
    a = [(m.causal, m.window) for m in ours.masks]
    b = [(m.causal, m.window) for m in theirs.masks]
    if a != b:
        problems.append(f"layers (causal, window): {a} would read back as {b}")
    if ours.qk_norm != theirs.qk_norm:  # an RMS norm is no identity: nothing to write in its place
        problems.append(f"q/k norms: qk_norm {str(ours.qk_norm).lower()} would read back as "
                        f"{str(theirs.qk_norm).lower()} (its spec's layout.qk_norm)")
    if ours.max_draft_len != theirs.max_draft_len:
        problems.append(f"max_draft_len: {ours.max_draft_len} would read back as {theirs.max_draft_len}")
    if problems:
        raise UserError(*(f"to={target.name}: the {target.name} format cannot express {p}" for p in problems))
    return back


# ---- weights ------------------------------------------------------------------------------------


def _norm_kind(family, name: str) -> str | None:
    for kind, template in family.norm_kinds.items():
        if NameTemplate(template).match(name) is not None:
            return kind
    return None


def restyle_norm(w: torch.Tensor, src: str, dst: str) -> torch.Tensor:
    """A norm weight stored for style ``src`` re-stored for style ``dst`` (``gemma``/``plain``)."""
    if src == dst:
        return w
    if src == "gemma":  # rms * (1 + w) == rms * w'
        return fold_gemma(w, w.dtype)
    return unfold_gemma(w, w.dtype)


def export(adapter: Adapter, source: Path, out: Path, to: str, overwrite: bool = False, adapter_dir=None,
           progress: bool = False, verifier: str | None = None) -> Path:
    """Convert ``source`` (``adapter``'s format) and write it in adapter ``to``'s source format
    (``progress``: a bar on stderr, shown only on a terminal; ``verifier``: the verifier's model
    id or path, for formats that record it)."""
    source, out = Path(source), Path(out)
    plan = conversion_plan(adapter, source)
    if not plan.complete:
        raise UserError(*(f"{source}: {l}" for l in plan.report().splitlines()))
    flat, r = plan.config, plan.resolved
    adapters = _all_adapters(adapter_dir)
    target = resolve_target(to, r, adapter_dir, adapters)
    markers = all_markers(adapter_dir, adapters)
    raw = source_config_from_flat(target, flat, r, read_config(source), verifier, markers)
    tflat = check_config(target, flat, r, raw, markers)
    layout = target.family.target_layout(tflat)
    if {n: (m.shape, m.dtype) for n, m in layout.items()} != {n: (m.shape, m.dtype) for n, m in plan.outputs.items()}:
        raise UserError(f"to={target.name}: the target layout differs from the converted one")
    src_styles, dst_styles = r.norms, target.norm_styles()
    value_scale = r.value_scale
    ctx = Context(tflat)
    apps = inverse_apps(target, layout)

    work = make_scratch(".draftsmith-export-", out.parent if out.parent.exists() else None)  # owned: see io/scratch
    tmp = None
    try:
        tmp = atomic_dir(out, overwrite, "export", [source])
        converted = execute(plan, work / "converted", progress=False)
        groups = tqdm(_groups(layout, apps), desc=f"export {target.name}", unit="group",
                      disable=None if progress else True, leave=False)
        _write(target, converted, layout, apps, groups, src_styles, dst_styles, ctx, tmp, value_scale)
        (tmp / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
        publish(tmp, out, overwrite, [source])
    except BaseException:
        if tmp is not None:
            remove_temp(tmp)
        raise
    finally:
        remove_temp(work)
    return out


def fold_value_scale(w: torch.Tensor, scale: float) -> torch.Tensor:
    """``o_proj.weight`` with the value scale folded in: ``o_proj(attn(q, k, s v)) ==
    (s W_o) attn(q, k, v)`` (attention is linear in V); ``s W_o`` formed in float32, rounded once."""
    return w if scale == 1.0 else (w.float() * scale).to(w.dtype)


def _write(target: Adapter, converted: Path, layout, apps, groups, src_styles, dst_styles, ctx, tmp: Path,
           value_scale: float = 1.0) -> None:
    where = {n: st.file for n, st in read_headers(converted).items()}  # the hardened reader's checks
    saver = ShardedSaver(tmp, target.spec.weights.max_shard_bytes)

    with ExitStack() as stack:
        handles: dict[Path, Any] = {}

        def load(name: str) -> torch.Tensor:
            f = where[name]
            if f not in handles:
                handles[f] = stack.enter_context(safe_open(str(f), framework="pt"))
            return handles[f].get_tensor(name)

        for group in groups:
            tensors = {}
            for n in group:
                t = load(n)
                kind = _norm_kind(target.family, n)
                if kind is not None:
                    t = restyle_norm(t, src_styles[kind], dst_styles[kind])
                if _O_PROJ.match(n) is not None:
                    t = fold_value_scale(t, value_scale)
                tensors[n] = t
            for name, t in sorted(run_inverse(apps, tensors, ctx).items()):
                saver.add(target.renamer.inverse(name), t)
    saver.finish()
