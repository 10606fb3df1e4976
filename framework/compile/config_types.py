"""Types and ranges of a flattened config's math-bearing keys, checked before the family
completes it (derives head_dim, mirrors keys) and before anything is written.

A value of the wrong JSON type (``"7"``, ``7.0``, ``true`` for an integer; a string window;
string layer ids; ``"1.702"`` for a number; ``"false"`` or ``1`` for a switch, which readers
that test its truth would take as true) or out of range (block size 0, window -4) is refused
in one line naming the key as the raw ``config.json`` spells it. :class:`~.resolved.ResolvedDrafter` checks
the same again (strictly typed fields) when ``draft`` loads a converted checkpoint.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import UserError
from .dotted import get_dotted


def _int(v: Any) -> bool:
    return type(v) is int


def _pos_int(v: Any) -> str | None:
    return None if _int(v) and v >= 1 else "must be an integer >= 1"


def _nonneg_int(v: Any) -> str | None:
    return None if _int(v) and v >= 0 else "must be an integer >= 0"


def _window(v: Any) -> str | None:
    return None if v is None or (_int(v) and v >= 1) else "must be an integer >= 1 or null"


def _pos_number(v: Any) -> str | None:
    ok = type(v) in (int, float) and v == v and v > 0 and v != float("inf")
    return None if ok else "must be a finite number > 0"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def _layer_ids(v: Any) -> str | None:
    if not isinstance(v, list) or not v:
        return "must be a non-empty list of integers"
    if not all(_int(i) and i >= 0 for i in v):
        return "must be a list of integers >= 0"
    if len(set(v)) != len(v):
        return "must not repeat a layer"
    return None


#: flattened key -> check (None when fine, else what is wrong)
CHECKS: dict[str, Callable[[Any], str | None]] = {
    "hidden_size": _pos_int, "num_attention_heads": _pos_int, "num_key_value_heads": _pos_int,
    "head_dim": _pos_int, "rotary_dim": _pos_int, "intermediate_size": _pos_int, "vocab_size": _pos_int,
    "num_hidden_layers": _pos_int, "target_hidden_size": _pos_int,
    "dflash_config.block_size": _pos_int, "dflash_config.mask_token_id": _nonneg_int,
    "dflash_config.target_layer_ids": _layer_ids, "dflash_config.swa_window_size": _window,
    "sliding_window": _window, "rms_norm_eps": _pos_number, "rope_theta": _pos_number,
    "swiglu_alpha": _pos_number, "swiglu_limit": _pos_number,
    "dspark_config.markov_rank": _nonneg_int, "attention_bias": _bool, "mlp_bias": _bool,
    # switches a reader tests for truth: ``"false"`` or ``1`` would read as true there
    "use_sliding_window": _bool, "is_causal": _bool, "sliding_window_non_causal": _bool,
    "dflash_config.use_swa": _bool, "dspark_config.sample_from_anchor": _bool,
    "dspark_config.shift_label": _bool, "dspark_config.enable_confidence_head": _bool,
    "dspark_config.confidence_head_with_markov": _bool,
    # read by no forward here, but carried to readers that compute with them (``family.carried``):
    # TensorRT-LLM sizes the RoPE table and DFlash's context buffers by min(max_seq_len, it)
    "max_position_embeddings": _pos_int, "num_target_layers": _pos_int,
}


def check_config_types(out: dict, sources: dict[str, str], where: str,
                       spell: Callable[[str], str] = lambda key: key) -> None:
    """Refuse (all at once, one line each) present keys of ``out`` with a wrong type or range,
    each named as ``config.json`` spells it (a ``config.fields`` rule's source, else ``spell``:
    flattened key -> raw spelling). Rules across keys (mask id < vocab, the shape invariants) are
    the record's (:class:`~.resolved.ResolvedDrafter`, :class:`~.resolved.Dims`)."""
    problems = []

    def name(key: str) -> str:
        src = sources.get(key, "")
        return src.removeprefix("config.json: ") if src.startswith("config.json: ") else spell(key)

    for key, check in CHECKS.items():
        v = get_dotted(out, key)
        if v is None and key not in ("sliding_window", "dflash_config.swa_window_size"):
            continue
        why = check(v)
        if why:
            shown = repr(v)
            problems.append(f"{where}: {name(key)}: {shown[:60]}{'...' if len(shown) > 60 else ''} {why}")
    if problems:
        raise UserError(*problems)
