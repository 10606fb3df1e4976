"""``draftsmith init``: the ``weights`` pieces of a starter spec (rename rules, transforms).

Each function returns its piece of the :class:`AdapterSpec` and writes its comments and
TODOs into a :class:`~.read.Remarks`. Target names come from the family
(:mod:`.layout`); the source spellings below are those of real writers.
"""

from __future__ import annotations

import re

import torch

from ...transforms.base import get_transform
from ..spec.schema import RenameRule, TransformRule, WeightsSpec
from .layout import TargetLayout, norm_regex
from .read import Checkpoint, Remarks

#: top-level (non-layer) names of real writers -> the target-layout name they mean
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
#: the companion scale spellings ``dequant_mxfp8`` reads
SCALE_SUFFIXES = tuple(get_transform("dequant_mxfp8").Params.model_fields["scale_suffixes"].default)
SHARED = tuple(WeightsSpec().shared_with_target)
_DTYPE_NAMES = {torch.uint8: "uint8", getattr(torch, "float8_e8m0fnu", None): "float8_e8m0fnu"}
RENAME = ("weights", "rename")
TRANSFORMS = ("weights", "transforms")


def _infix(rest: str, layout: TargetLayout) -> str:
    """What stands between ``<container>.<i>.`` and the first layer module (``decoder_layer.``)."""
    comps = rest.split(".")
    k = next((j for j, c in enumerate(comps) if c in layout.modules), None)
    return ".".join(comps[:k]) + "." if k else ""


def _unmapped(ck: Checkpoint, layout: TargetLayout, infix: str | None) -> list[str]:
    """Names no rule maps onto a target name (scale companions and borrowed names aside)."""
    targets = {*layout.layer, *layout.fused}
    out = []
    for n, r in ck.rel.items():
        if n in ck.layers or r.endswith(SCALE_SUFFIXES):
            continue
        if r not in KNOWN_RENAMES and r not in layout.top and r not in SHARED and not r.endswith(SHARED):
            out.append(n)
    for n, m in ck.layers.items():
        rest = m.rest[len(infix or ""):]
        if not rest.endswith(SCALE_SUFFIXES) and rest not in targets:
            out.append(n)
    return out


def renames(ck: Checkpoint, layout: TargetLayout, say: Remarks) -> list[RenameRule]:
    """Rules mapping the checkpoint's names onto the family's: the per-layer pattern, known
    top-level spellings, the common prefix; a TODO per name left without one."""
    rules: list[RenameRule] = []

    def add(rule: RenameRule, comment: str | None = None) -> None:
        if comment:
            say.comments[RENAME + (len(rules),)] = comment
        rules.append(rule)

    containers = {m.container for m in ck.layers.values()}
    infixes = {_infix(m.rest, layout) for m in ck.layers.values()}
    container = next(iter(containers)) if len(containers) == 1 else None
    infix = next(iter(infixes)) if len(infixes) == 1 else None
    if ck.layers and (container is None or infix is None):
        say.note(RENAME, say.todo(f"per-layer names disagree (containers {sorted(containers)}, infixes "
                                  f"{sorted(infixes)}): write one template rule per pattern"))
    elif ck.layers and (container != layout.container or infix):
        add(RenameRule(kind="template", match=ck.prefix + container + ".{i}." + infix + "{rest*}",
                       to=layout.container + ".{i}.{rest*}"), f"per-layer pattern: {container}.N.{infix or ''}...")
    for n, r in ck.rel.items():
        if n not in ck.layers and not r.endswith(SCALE_SUFFIXES) and r in KNOWN_RENAMES:
            add(RenameRule(kind="template", match=n, to=KNOWN_RENAMES[r]))
    if ck.prefix:
        add(RenameRule(kind="prefix", match=ck.prefix, to=""), "the common prefix of every tensor name")
    for n in _unmapped(ck, layout, infix):
        say.note(RENAME, f"TODO: no target-layout name for {n} {ck.headers[n]}: add a rename rule (to: null drops it)")
        say.todos.append(f"unmapped tensor {n}")
    return rules


class _Rules(list):
    """Transform rules with their comments, by position."""

    def __init__(self, say: Remarks):
        super().__init__()
        self.say = say

    def add(self, rule: TransformRule, comment: str | None = None, params_comment: str | None = None) -> tuple:
        path = TRANSFORMS + (len(self),)
        if comment:
            self.say.comments[path] = comment
        if params_comment:
            self.say.comments[path + ("params",)] = params_comment
        self.append(rule)
        return path


def split_rules(ck: Checkpoint, layout: TargetLayout, rules: _Rules) -> None:
    """A ``split`` per fused projection found in some layer (under any layer naming)."""
    lead = layout.container + ".{i}."
    for fused in layout.fused.values():
        if not any(m.rest.endswith(fused.rest) for m in ck.layers.values()):
            continue
        rx = "^" + re.escape(layout.container) + r"\.\d+\." + re.escape(fused.rest) + "$"
        rules.add(TransformRule(op="split", match=rx, params={
            "input": lead + fused.rest, "outputs": list(fused.outputs), "sizes": fused.sizes, "dim": 0}),
            f"a fused {fused.name}, rows in this order", f"TODO: confirm the row order ({', '.join(fused.parts)})")
        rules.say.todos.append(f"row order of the fused {fused.name}")


def _scales(ck: Checkpoint, fp8: list[str]) -> dict[str, str]:
    """F8_E4M3 weight -> the scale suffix its companion has."""
    return {n: s for n in fp8 for s in [next((s for s in SCALE_SUFFIXES if n + s in ck.headers), None)] if s}


def mxfp8_rule(ck: Checkpoint, rules: _Rules) -> None:
    """``dequant_mxfp8`` when the F8_E4M3 weights have MXFP8 scales (one per 32, U8/F8_E8M0)."""
    h, say = ck.headers, rules.say
    fp8 = [n for n in sorted(h) if h[n].dtype == torch.float8_e4m3fn]
    if not fp8:
        return
    qc = ck.merged.get("quantization_config")
    quant_method = qc.get("quant_method") if isinstance(qc, dict) else None
    found = _scales(ck, fp8)
    blocks = {h[n].shape[-1] // max(1, h[n + s].shape[-1]) if h[n + s].shape[:-1] == h[n].shape[:-1] else None
              for n, s in found.items()}
    scale_dtypes = {h[n + s].dtype for n, s in found.items()}
    if not (found and blocks == {32} and scale_dtypes <= set(_DTYPE_NAMES) and len(set(found.values())) == 1):
        say.note(TRANSFORMS, f"TODO: {len(fp8)} F8_E4M3 tensors whose scales are not MXFP8 (one per 32, "
                             "U8/F8_E8M0): no transform dequantizes them yet")
        say.todos.append("unsupported FP8 scales")
        return
    mods = sorted({ck.rel[n].removesuffix(".weight").split(".")[-1] for n in found})
    path = rules.add(TransformRule(op="dequant_mxfp8", match="\\.(" + "|".join(mods) + ")\\.weight$", params={
        "synth_scale_suffix": next(iter(set(found.values()))),
        "synth_scale_dtype": _DTYPE_NAMES[next(iter(scale_dtypes))]}),
        "F8_E4M3 weights, one scale byte per 32 along the input dim")
    if quant_method not in (None, "mxfp8"):
        say.note(path, f"TODO: quantization_config.quant_method is {quant_method!r}, the scales look MXFP8")
        say.todos.append("quant_method vs MXFP8 scales")
    if len(found) != len(fp8):
        say.note(path, f"TODO: {len(fp8) - len(found)} F8_E4M3 tensors have no scale companion")
        say.todos.append("F8_E4M3 tensors without scales")


def gemma_rules(ck: Checkpoint, layout: TargetLayout, rules: _Rules) -> None:
    """``norm_fold_gemma`` rules when the config says Gemma norms: fold the norms the engine
    runs plainly, keep the others (the family's norm names)."""
    m = ck.merged
    gemma = m.get("use_gemma_norm") is True or "gemma" in str(m.get("model_type", "")).lower()
    if gemma:
        rules.add(TransformRule(op="norm_fold_gemma", match=norm_regex(layout.fold, layout.container),
                                params={"mode": "fold"}), "TensorRT-LLM runs these plainly: store 1 + w")
        rules.add(TransformRule(op="norm_fold_gemma", match=norm_regex(layout.keep, layout.container),
                                params={"mode": "keep"}), "Gemma norms kept as w (engine in Gemma mode)")
    rules.say.comments[TRANSFORMS] = "norms: " + ("use_gemma_norm / a Gemma model_type: Gemma norms" if gemma
                                                  else "no use_gemma_norm or Gemma model_type in the config: plain norms")


def transforms(ck: Checkpoint, layout: TargetLayout, say: Remarks) -> list[TransformRule]:
    """Transform rules: split fused projections, dequantize MXFP8, fold or keep Gemma norms."""
    rules = _Rules(say)
    split_rules(ck, layout, rules)
    mxfp8_rule(ck, rules)
    gemma_rules(ck, layout, rules)
    return list(rules)
