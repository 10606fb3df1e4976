"""The one place that checks every spec- or config-derived value an emitted package carries.

An emitted package is fixed Python text plus data (``resolved.json``). This module validates
that data, both when ``draftsmith emit`` writes it and when the package is imported inside
TensorRT-LLM, so a string from a spec, a source ``config.json`` or a converted ``config.json``
never becomes code:

- architecture and package names are Python identifiers (ASCII, no keyword);
- every lowering name resolves through the closed registry (:mod:`draftsmith.lowering.base`);
- the decoding type is one of :data:`DECODING_TYPES`;
- a backbone named by the spec (``engine.trtllm_backbone`` / ``backbone=``) is
  ``dotted.module:Class`` with every part an identifier, under ``tensorrt_llm.`` or in
  :data:`BACKBONE_ALLOWLIST` (which no spec can extend).

Every refusal is a :class:`ValueError` with one line naming the key and quoting the value
with ``repr``.
"""

from __future__ import annotations

import keyword
import re
from typing import Any, Mapping, Optional

from ...lowering.base import DEVICE_CLASSES, LOWERINGS  # torch-free; importing it registers the built-ins

#: decoding types the package may register a builder for (TensorRT-LLM's names).
DECODING_TYPES = ("DFlash", "DSpark")
#: module prefix a spec-named backbone class must live under.
TRTLLM_PREFIX = "tensorrt_llm."
#: other modules a spec-named backbone may come from; fixed here, never read from a spec.
BACKBONE_ALLOWLIST: tuple[str, ...] = ()
#: the generated backbone (draftsmith's own, built from TensorRT-LLM's modules).
GENERATED = "generated"
#: keys a resolved.json may carry besides the required ones (``target_architecture``: the target's
#: architecture whose TensorRT-LLM class the package re-registers, :func:`~.runtime.register_target`).
OPTIONAL_PACKAGE_KEYS = frozenset({"target_architecture"})
#: most bytes of a resolved.json an emitted package reads.
MAX_PACKAGE_DATA_BYTES = 4 << 20

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")


def check_identifier(value: Any, what: str) -> str:
    """``value`` if it is an ASCII Python identifier (not a keyword), else one-line ValueError."""
    if not isinstance(value, str) or not _IDENT.match(value) or keyword.iskeyword(value):
        raise ValueError(f"{what}: {value!r} is not a Python identifier")
    return value


def check_dotted(value: Any, what: str) -> str:
    """``value`` if it is ``a.b.c`` with every part an identifier, else one-line ValueError."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what}: {value!r} is not a dotted module name")
    for part in value.split("."):
        if not _IDENT.match(part) or keyword.iskeyword(part):
            raise ValueError(f"{what}: {value!r} is not a dotted module name")
    return value


def check_decoding_type(value: Any, what: str = "decoding_type") -> str:
    if value not in DECODING_TYPES:
        raise ValueError(f"{what}: {value!r} is not one of {', '.join(DECODING_TYPES)}")
    return value


def check_backbone(value: Any, what: str = "backbone") -> Optional[str]:
    """``None``, :data:`GENERATED` or ``module:Class`` with the module under ``tensorrt_llm.``
    or in :data:`BACKBONE_ALLOWLIST`; anything else one-line ValueError."""
    if value is None or value == GENERATED:
        return value
    if not isinstance(value, str) or value.count(":") != 1:
        raise ValueError(f"{what}: {value!r} is not 'package.module:ClassName'")
    module, cls = value.split(":")
    check_dotted(module, what)
    check_identifier(cls, what)
    if not (module.startswith(TRTLLM_PREFIX) or module in BACKBONE_ALLOWLIST):
        raise ValueError(f"{what}: {value!r}: a backbone class must come from a TensorRT-LLM module "
                         f"({TRTLLM_PREFIX}...)")
    return value


def check_lowerings(layers: Any, what: str = "resolved.layers") -> None:
    """Every ``layers[i].lowering`` entry names a registered lowering for a known device class."""
    if not isinstance(layers, (list, tuple)):
        raise ValueError(f"{what}: not a list")
    for i, layer in enumerate(layers):
        low = layer.get("lowering") if isinstance(layer, Mapping) else getattr(layer, "lowering", None)
        if not isinstance(low, Mapping):
            raise ValueError(f"{what}[{i}].lowering: not a mapping")
        for device, name in low.items():
            if device not in DEVICE_CLASSES:
                raise ValueError(f"{what}[{i}].lowering: device class {device!r} is not one of "
                                 f"{', '.join(DEVICE_CLASSES)}")
            check_identifier(name, f"{what}[{i}].lowering.{device}")
            if name not in LOWERINGS:
                raise ValueError(f"{what}[{i}].lowering.{device}: {name!r} is not a registered lowering "
                                 f"(known: {', '.join(sorted(LOWERINGS))})")


def check_package_data(data: Any) -> None:
    """Validate a package's ``resolved.json`` (already parsed): the keys it must have, each
    string as above. The ``resolved`` record itself is validated by :class:`ResolvedDrafter`."""
    if not isinstance(data, Mapping):
        raise ValueError("resolved.json: not a JSON object")
    want = {"adapter", "architecture", "decoding_type", "backbone", "package", "resolved"}
    if not want <= set(data) <= want | OPTIONAL_PACKAGE_KEYS:
        raise ValueError(f"resolved.json: keys {sorted(map(str, data))!r} are not {sorted(want)!r} "
                         f"(optional: {sorted(OPTIONAL_PACKAGE_KEYS)!r})")
    check_identifier(data["architecture"], "resolved.json architecture")
    target = data.get("target_architecture")
    if target is not None:
        check_identifier(target, "resolved.json target_architecture")
        if target == data["architecture"]:
            raise ValueError(f"resolved.json target_architecture: {target!r} is the drafter's own architecture")
    check_identifier(data["package"], "resolved.json package")
    check_decoding_type(data["decoding_type"], "resolved.json decoding_type")
    check_backbone(data["backbone"], "resolved.json backbone")
    if not isinstance(data["adapter"], str) or not re.match(r"^[a-z][a-z0-9_]{0,99}$", data["adapter"]):
        raise ValueError(f"resolved.json adapter: {data['adapter']!r} is not an adapter name")
    resolved = data["resolved"]
    if not isinstance(resolved, Mapping):
        raise ValueError("resolved.json resolved: not a JSON object")
    check_lowerings(resolved.get("layers"), "resolved.json resolved.layers")
