"""RoPE scaling parameters: which rope types draftsmith implements, what each needs, and the
defaults transformers itself documents (the only defaults taken; each is reported).

Facts from transformers 5.19 ``modeling_rope_utils.py`` (``_compute_linear_scaling_rope_parameters``,
``_compute_yarn_parameters``, ``_compute_llama3_parameters`` and the ``_validate_*_rope_parameters``
methods of ``RotaryEmbeddingConfigMixin``):

- ``linear``: required ``factor``.
- ``yarn`` (Peng et al. 2023): required ``factor``, ``original_max_position_embeddings``;
  optional ``beta_fast`` (documented default 32), ``beta_slow`` (default 1), ``truncate``
  (default true), ``attention_factor`` (else derived: ``0.1 ln(s) + 1``, or
  ``mscale(s, mscale) / mscale(s, mscale_all_dim)`` when both ``mscale`` and
  ``mscale_all_dim`` are given).
- ``llama3``: required ``factor``, ``low_freq_factor``, ``high_freq_factor``,
  ``original_max_position_embeddings``.

transformers also fills ``original_max_position_embeddings`` from ``max_position_embeddings``
and ``factor`` from their ratio when absent; draftsmith does not guess those: absent, the
checkpoint is refused. Phi-3 style checkpoints keep ``original_max_position_embeddings`` at the
backbone's top level (transformers prefers it); it is read there too, and a contradicting
second value is refused.

The math itself lives in ``framework/runtime/rope.py``.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import UserError

#: rope type -> required scaling keys
REQUIRED = {
    "default": (),
    "linear": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}
#: rope type -> optional keys with the default transformers documents (None: derived)
OPTIONAL = {
    "default": {},
    "linear": {},
    "yarn": {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True, "attention_factor": None, "mscale": None,
             "mscale_all_dim": None},
    "llama3": {},
}
#: keys of a rope block that are not scaling parameters (read elsewhere)
NOT_SCALING = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
SUPPORTED = tuple(REQUIRED)
DEFAULT_SOURCE = "transformers 5.19 modeling_rope_utils documented default"
#: largest original context accepted (positions stay exact in float64 far beyond any model)
MAX_POSITIONS = 2**40


def _number(where: str, key: str, v: Any, positive: bool = True) -> float:
    try:
        f = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan
    except OverflowError:  # an integer beyond float range
        f = math.nan
    if not math.isfinite(f) or (positive and not f > 0):
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:40] + "..."
        raise UserError(f"config: {where}.{key} must be a {'positive ' if positive else ''}number, found {shown}")
    return f


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature ``0.1 * mscale * ln(scale) + 1`` (1 for ``scale <= 1``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def read_scaling(rope_type: str, block: dict[str, Any], where: str, top_original: Any = None,
                 theta: float | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The complete scaling parameters of ``rope_type`` from the checkpoint's rope ``block``
    (``rope_parameters`` or ``rope_scaling``, spelled ``where``).

    Returns ``(params, sources)``: every parameter the math uses (documented defaults and the
    derived YaRN ``attention_factor`` filled in), and, for each parameter not read from the
    checkpoint, where it came from. Unknown keys, missing required keys and bad values are
    refused in one line naming the key. ``theta``: the RoPE base (YaRN needs it above 1).
    """
    if rope_type not in REQUIRED:
        raise UserError(f"config: {where}.rope_type {rope_type!r} is not supported (supported: "
                        f"{', '.join(SUPPORTED)}); converting it would change the drafter's positions")
    given = {k: v for k, v in block.items() if k not in NOT_SCALING and v is not None}
    if top_original is not None and rope_type in ("yarn", "llama3"):
        inner = given.get("original_max_position_embeddings")
        if inner is not None and inner != top_original:
            raise UserError(f"config: original_max_position_embeddings is given twice with different values: "
                            f"original_max_position_embeddings={top_original!r}, "
                            f"{where}.original_max_position_embeddings={inner!r}")
        given["original_max_position_embeddings"] = top_original
    known = set(REQUIRED[rope_type]) | set(OPTIONAL[rope_type])
    unknown = sorted(set(given) - known)
    if unknown:
        raise UserError(f"config: {where}.{unknown[0]} is not a parameter of rope_type {rope_type!r} "
                        f"(known: {', '.join(sorted(known)) or 'none'}); refusing rather than ignoring it")
    missing = [k for k in REQUIRED[rope_type] if k not in given]
    if missing:
        raise UserError(f"config: rope_type {rope_type!r} needs {where}.{missing[0]} (not set; transformers "
                        f"documents no default for it)")
    params: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in REQUIRED[rope_type]:
        if key != "original_max_position_embeddings":
            params[key] = _number(where, key, given[key])
    if rope_type in ("linear", "yarn", "llama3") and params["factor"] < 1:
        raise UserError(f"config: {where}.factor must be >= 1, found {given['factor']!r}")
    if "original_max_position_embeddings" in REQUIRED[rope_type]:
        o = given["original_max_position_embeddings"]
        if isinstance(o, bool) or not isinstance(o, int) or not 1 <= o <= MAX_POSITIONS:
            shown = repr(o) if len(repr(o)) <= 40 else repr(o)[:40] + "..."
            raise UserError(f"config: {where}.original_max_position_embeddings must be an integer in "
                            f"1..{MAX_POSITIONS}, found {shown}")
        params["original_max_position_embeddings"] = o
    if rope_type == "llama3" and not params["high_freq_factor"] > params["low_freq_factor"]:
        raise UserError(f"config: {where}.high_freq_factor {given['high_freq_factor']!r} must be greater than "
                        f"low_freq_factor {given['low_freq_factor']!r}")
    if rope_type == "yarn":
        if theta is not None and not theta > 1:
            raise UserError(f"config: rope_type 'yarn' needs rope_theta > 1 (its correction range divides by "
                            f"ln(rope_theta)), found {theta!r}")
        for key in ("beta_fast", "beta_slow"):
            if key in given:
                params[key] = _number(where, key, given[key])
            else:
                params[key] = OPTIONAL["yarn"][key]
                sources[key] = f"{DEFAULT_SOURCE} ({key} {OPTIONAL['yarn'][key]:g})"
        if "truncate" in given:
            if not isinstance(given["truncate"], bool):
                raise UserError(f"config: {where}.truncate must be true or false, found {given['truncate']!r}")
            params["truncate"] = given["truncate"]
        else:
            params["truncate"] = True
            sources["truncate"] = f"{DEFAULT_SOURCE} (truncate true)"
        ms = {k: _number(where, k, given[k], positive=False) for k in ("mscale", "mscale_all_dim") if k in given}
        if "attention_factor" in given:
            params["attention_factor"] = _number(where, "attention_factor", given["attention_factor"])
        elif ms.get("mscale") and ms.get("mscale_all_dim"):
            params["attention_factor"] = (yarn_mscale(params["factor"], ms["mscale"])
                                          / yarn_mscale(params["factor"], ms["mscale_all_dim"]))
            sources["attention_factor"] = "derived: mscale(factor, mscale) / mscale(factor, mscale_all_dim) (YaRN)"
        else:
            params["attention_factor"] = yarn_mscale(params["factor"])
            sources["attention_factor"] = "derived: 0.1 ln(factor) + 1 (YaRN)"
        params.update(ms)
    return params, sources
