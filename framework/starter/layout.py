"""What ``draftsmith init`` reads of a family's target layout (never restated here).

The family's ``target_layout`` is asked for the names of a small probe config, once with one
layer and once with two: names only in the second are per-layer (``layers.{i}.<rest>``), the
rest are top-level. Every config size of the probe is a distinct prime, so a part's row count
factors back into the config keys it is made of (the ``sizes`` of a ``split``). The norms the
engine runs plainly (stored ``1 + w``) are ``compile/trtllm_limits.PLAIN_NORMS``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..compile.family import GQADFlash
from ..compile.trtllm_limits import PLAIN_NORMS
from ..errors import UserError

#: config size keys -> distinct primes (order: how a product of them is written)
PROBE_SIZES = {"num_attention_heads": 5, "num_key_value_heads": 7, "head_dim": 11, "intermediate_size": 13,
               "hidden_size": 17, "vocab_size": 19}
#: fused projections of real writers (TensorRT-LLM, vLLM) -> their parts, rows in this order
FUSED_PARTS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


@dataclass(frozen=True)
class Fused:
    """A fused per-layer tensor ``<module>.<name>.<kind>`` the family holds as ``parts``."""

    name: str
    rest: str
    parts: tuple[str, ...]
    outputs: tuple[str, ...]
    sizes: list


@dataclass(frozen=True)
class TargetLayout:
    """The family's target names: ``top`` (no layer index), per-layer ``layer`` rests under
    ``container.{i}.``, the layer ``modules`` (first component of a rest), the ``fused``
    rests a ``split`` turns into layer names, and the Gemma norm templates to fold and keep."""

    top: tuple[str, ...]
    container: str
    layer: tuple[str, ...]
    modules: frozenset[str]
    fused: dict[str, Fused]
    fold: tuple[str, ...]
    keep: tuple[str, ...]


def _probe(layers: int) -> dict:
    """A config under which the family's layout holds every optional tensor."""
    return {**PROBE_SIZES, "num_hidden_layers": layers, "target_hidden_size": 23, "torch_dtype": "bfloat16",
            "attention_bias": True, "mlp_bias": True, "dflash_config": {"target_layer_ids": [0]},
            "dspark_config": {"markov_rank": 29, "markov_head_type": "vanilla", "enable_confidence_head": True,
                              "confidence_head_with_markov": True}}


def _factors(rows: int) -> str | list[str]:
    """The probe keys whose product is ``rows`` (one key: the key itself)."""
    keys = []
    for key, p in PROBE_SIZES.items():
        while rows % p == 0:
            keys.append(key)
            rows //= p
    if rows != 1 or not keys:
        raise UserError(f"draftsmith init: a probe size {rows} is no product of config keys")
    return keys[0] if len(keys) == 1 else keys


def _fused(container: str, shapes: dict[str, tuple]) -> dict[str, Fused]:
    """Fused rests whose parts are all per-layer target names (weights, then biases)."""
    out = {}
    for name, parts in FUSED_PARTS.items():
        for rest in shapes:
            mod, _, kind = rest.rpartition(f".{parts[0]}.")
            if not _ or "." in kind:
                continue
            names = [f"{mod}.{p}.{kind}" for p in parts]
            if all(n in shapes for n in names):
                out[f"{mod}.{name}.{kind}"] = Fused(
                    name, f"{mod}.{name}.{kind}", parts, tuple(f"{container}.{{i}}.{n}" for n in names),
                    [_factors(shapes[n][0]) for n in names])
    return out


def engine_plain_norms(kinds) -> set[str]:
    """The norm kinds the served engine applies plainly, so a Gemma ``w`` must be stored ``1 + w``
    (:data:`~..compile.trtllm_limits.PLAIN_NORMS`, which ``emit`` refuses stored Gemma-style)."""
    return {k for k in kinds if k in PLAIN_NORMS}


def target_layout(family: GQADFlash) -> TargetLayout:
    """The target names ``init`` maps a checkpoint onto, read from ``family``."""
    one, two = family.target_layout(_probe(1)), family.target_layout(_probe(2))
    second = [n for n in two if n not in one]
    j = second[0].split(".").index("1")
    container = ".".join(second[0].split(".")[:j])
    lead = container + ".1."
    shapes = {n[len(lead):]: two[n].shape for n in second if n.startswith(lead)}
    first = {f"{container}.0.{r}" for r in shapes}
    plain = engine_plain_norms(list(family.norm_kinds))
    norms = family.norm_kinds.items()
    return TargetLayout(
        top=tuple(n for n in one if n not in first), container=container, layer=tuple(shapes),
        modules=frozenset(r.split(".")[0] for r in shapes), fused=_fused(container, shapes),
        fold=tuple(t for k, t in norms if k in plain), keep=tuple(t for k, t in norms if k not in plain))


def norm_regex(templates: tuple[str, ...], container: str) -> str:
    """One regex over the target names ``templates`` (``{i}`` a layer index): top-level
    names first, then the per-layer ones under one ``container\\.\\d+\\.`` group."""
    lead = container + ".{i}."
    suffix = ".weight" if all(t.endswith(".weight") for t in templates) else ""
    top = [re.escape(t.removesuffix(suffix)) for t in templates if not t.startswith(lead)]
    per = [re.escape(t[len(lead):].removesuffix(suffix)) for t in templates if t.startswith(lead)]
    alts = top + ([re.escape(container) + r"\.\d+\." + (per[0] if len(per) == 1 else f"({'|'.join(per)})")]
                  if per else [])
    return "^" + (alts[0] if len(alts) == 1 else f"({'|'.join(alts)})") + re.escape(suffix) + "$"
