"""Stand-in of ``tensorrt_llm._torch.models.modeling_utils``: the per-process registries.

Every dict here is module state, so each process has its own: a worker process sees only what
was imported (or declared through ``register_external_model_modules``) in that process.
"""

import importlib
from typing import Callable, Dict, Optional

from ..pinned_gate import OLD
from ._arch_index import BUILTIN_PREFIX, MODEL_ARCH_TO_MODULE, SPEC_MODE_TO_MODULE

MODEL_CLASS_MAPPING: Dict[str, type] = {}
DRAFT_MODEL_BUILDER_MAPPING: Dict[object, Callable] = {}
MODEL_CLASS_CONFIG_LOADER_DEFAULT_MAPPING: Dict[str, type] = {}
_EXTERNAL_ARCH_TO_MODULE: Dict[str, str] = {}
FUSED_MODULE_COMPONENTS = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def is_builtin_zoo_module(module_name: str) -> bool:
    """Reproduces modeling_utils.py (index id 57359368733, commit not shown; cb4c622c, cited before, holds filter_weights, not these) ``is_builtin_zoo_module``: a module inside
    ``tensorrt_llm._torch.models``."""
    return module_name.startswith(BUILTIN_PREFIX)


def _record(mapping: dict, key, obj):
    """The slot rule both registries of modeling_utils.py (index id 57359368733) apply: a built-in object
    only fills an empty slot, an external one always overwrites."""
    existing = mapping.get(key)
    if existing is None or existing is obj or not is_builtin_zoo_module(obj.__module__):
        mapping[key] = obj
    return obj


def register_auto_model(name: str):
    """Reproduces modeling_utils.py (index id 57359368733) ``register_auto_model``: records the class under
    architecture ``name`` (:func:`_record`)."""
    return lambda cls: _record(MODEL_CLASS_MAPPING, name, cls)


def _ensure_model_registered(arch: str) -> None:
    """Reproduces ``_ensure_model_registered`` (index id 57359368733): import the external provider declared
    for ``arch`` (``register_external_model_modules``), else the built-in one from the index."""
    full = _EXTERNAL_ARCH_TO_MODULE.get(arch)
    if full is None:
        mod = MODEL_ARCH_TO_MODULE.get(arch)
        if mod is None:
            return
        full = BUILTIN_PREFIX + mod
    importlib.import_module(full)


def get_registered_model_class(arch: str) -> Optional[type]:
    """Reproduces ``get_registered_model_class`` (index id 57359368733) (lazy provider import, then lookup)."""
    if arch not in MODEL_CLASS_MAPPING:
        _ensure_model_registered(arch)
    return MODEL_CLASS_MAPPING.get(arch)


def register_external_model_modules(arch_to_module: Dict[str, str]) -> None:
    """Reproduces ``register_external_model_modules`` (index id 57359368733): declare where externally
    registered *architectures* live (module names), importing nothing. Draft-model builders
    have no such declaration."""
    _EXTERNAL_ARCH_TO_MODULE.clear()
    _EXTERNAL_ARCH_TO_MODULE.update(arch_to_module)


def export_external_model_modules() -> Dict[str, str]:
    """The architecture -> module map of every externally registered class in this process
    (what a serving process hands its workers). Not verified by name in the stored source
    (docs/trtllm-interface.md cites ``export_external_model_modules``); behaviour assumed:
    external ``register_auto_model`` registrations only."""
    return {a: c.__module__ for a, c in MODEL_CLASS_MAPPING.items() if not is_builtin_zoo_module(c.__module__)}


def get_model_architecture(config):
    """Reproduces ``get_model_architecture`` (index id 57359368733): ``architectures[0]`` through the
    registry; RuntimeError when unknown or missing."""
    archs = getattr(config, "architectures", None)
    if not archs:
        raise RuntimeError("Model architecture is not provided.")
    cls = get_registered_model_class(archs[0])
    if cls is None:
        raise RuntimeError(f"Unknown model architecture: {archs[0]}")
    return cls, archs[0]


def register_config_loader(name: str):
    """Reproduces ``register_config_loader`` (index id 57359368733). Exists, but the drafter config is built by
    ``ModelConfig.from_pretrained`` (modeling_speculative.py ``external_drafter_config_kwargs``
    passes no ``checkpoint_format``), so a loader registered here never sees a drafter."""

    def decorator(cls):
        MODEL_CLASS_CONFIG_LOADER_DEFAULT_MAPPING[name] = cls
        return cls

    return decorator


if not OLD:

    def register_draft_model(mode):
        """Reproduces ``register_draft_model`` (index id 57359368733): records the builder under ``mode``
        (:func:`_record`)."""
        return lambda builder: _record(DRAFT_MODEL_BUILDER_MAPPING, mode, builder)

    def get_registered_draft_model_builder(mode) -> Optional[Callable]:
        """Reproduces ``get_registered_draft_model_builder`` (index id 57359368733): import the built-in
        provider of ``mode`` (``SPEC_MODE_TO_MODULE``) when the slot is empty, then look up."""
        if mode not in DRAFT_MODEL_BUILDER_MAPPING:
            mod = SPEC_MODE_TO_MODULE.get(mode.name)
            if mod is not None:
                importlib.import_module(BUILTIN_PREFIX + mod)
        return DRAFT_MODEL_BUILDER_MAPPING.get(mode)


# ``DecoderModelForCausalLM`` lives in modeling_utils in TensorRT-LLM (index id 5904819667).
from ..modules.decoder_model import DecoderModel, DecoderModelForCausalLM  # noqa: E402,F401
