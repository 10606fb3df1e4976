"""A converted ``config.json`` read back from disk: its record (the ``draftsmith`` section), checked
against the keys beside it. TensorRT-LLM's classes read those keys (``dflash_config.block_size``,
``hidden_size``, ``dspark_config.shift_label``, ...) while draftsmith computes with the record, so
a config.json edited after conversion that no longer agrees with its record is refused, one line
a key, naming both values (re-run ``draftsmith convert``, with ``adapter.*`` overrides to change
one); it is never served with two answers."""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import UserError
from .attention import write_back
from .converted_config import render_engine_keys
from .dotted import get_dotted, set_dotted
from .family import get_family, softcap
from .resolve import MATH_KEYS, SWIGLU_KEYS, mlp_kind
from .resolved import ResolvedDrafter

_ABSENT = object()


def read_converted(config: Mapping[str, Any], where: str = "config.json") -> ResolvedDrafter:
    """The record of a converted ``config`` read from disk (``where`` names it), after checking
    that every key it was compiled from (:data:`~.resolve.MATH_KEYS`, the MLP's and DFlash 2's)
    and every key rendered from it for other readers (the masks' spellings,
    :func:`~.attention.write_back`, and TensorRT-LLM's, :func:`~.converted_config.render_engine_keys`)
    still says what the record says (a key the file lacks is not compared: null or absent)."""
    record = ResolvedDrafter.from_config(config, where)
    problems = [f"{where}: {key} is {_shown(have)} but its compiled record says {_shown(want)} ({source}); "
                "the file was edited after conversion: re-run `draftsmith convert` (adapter.* overrides change a value)"
                for key, source, have, want in _disagreements(config, record)]
    if problems:
        raise UserError(*problems)
    return record


def _disagreements(config: Mapping[str, Any], record: ResolvedDrafter):
    """``(key, where the record holds it, value in the config, value the record implies)`` for each
    disagreement, one a key."""
    keys = dict(MATH_KEYS)
    if record.mlp.kind == "swiglu_oai":
        keys.update(SWIGLU_KEYS)
    if record.dflash2 is not None:
        keys.update(get_family(record.family).dflash2_keys)
    if not record.heads.confidence:  # the record's switch is then false whatever the key says
        keys.pop("heads.confidence_with_markov")
    named = set()
    for field, key in keys.items():
        have = _get(config, key)
        want = _field(record, field)
        if have is not _ABSENT and not _same(_as_recorded(field, have), want):
            named.add(key)
            yield key, f"draftsmith.{field}", have, want
    rendered: dict[str, Any] = {}
    write_back(rendered, list(record.layers))  # the masks in the HF and DFlash spellings
    engine = render_engine_keys(record, config.get("model_type"))
    engine.pop("model_type")  # rendered from the flattened model_type, which the file no longer holds
    for key, value in _leaves(engine):
        set_dotted(rendered, key, value)
    for key, want in _leaves(rendered):
        have = _get(config, key)
        if key not in named and have is not _ABSENT and not _same(have, want):
            yield key, "written from it for TensorRT-LLM and transformers' readers", have, want


def _get(config: Mapping[str, Any], key: str) -> Any:
    value = get_dotted(config, key)
    return _ABSENT if value is None else value


def _as_recorded(field: str, value: Any) -> Any:
    """A config value as the record stores it (the derivations of ``resolve._record``)."""
    if field == "mlp.kind":
        try:
            return mlp_kind(value)
        except UserError:
            return value
    if field == "dflash2.selector.unary.softcap":
        return softcap(value)
    return value


def _field(record: ResolvedDrafter, dotted: str) -> Any:
    value: Any = record
    for part in dotted.split("."):
        value = value[part] if isinstance(value, Mapping) else getattr(value, part)
    return list(value) if isinstance(value, tuple) else value


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values: a switch is never a number, a number never a string."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _leaves(node: Mapping[str, Any], prefix: str = ""):
    for key, value in node.items():
        if isinstance(value, Mapping):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _shown(value: Any) -> str:
    return "absent" if value is _ABSENT else repr(value)
