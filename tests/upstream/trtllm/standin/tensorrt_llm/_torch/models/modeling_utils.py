"""``tensorrt_llm._torch.models.modeling_utils``: TensorRT-LLM's own registries, executed verbatim from
``deep/modeling_utils_excerpt.py`` (NVIDIA ``modeling_utils.py``, stored file id 57359368733, and
``_arch_index.py``, id 57561351364): ``register_auto_model``, ``_ensure_model_registered``,
``get_registered_model_class``, ``export_external_model_modules`` / ``register_external_model_modules``
(what a worker process is told), ``register_draft_model`` / ``get_registered_draft_model_builder``,
``get_model_architecture``, ``is_builtin_zoo_module``, ``SPEC_MODE_TO_MODULE``, ``filter_weights``,
``duplicate_kv_weight``, ``_load_weights_impl``. Every dict is module state: each process has its own.

Supplied here: ``MODEL_ARCH_TO_MODULE`` (the built-in zoo's rows) is the stand-in ``_arch_index``'s (the
stand-in models it ships); the names the excerpt imports are the stubs ``deep/loader.py`` gives.
``DecoderModel`` / ``DecoderModelForCausalLM`` are the stand-in classes of ``modules/decoder_model.py``
(transcribed constructors, the excerpt's ``load_weights``). Playing the old release (``pinned_gate.OLD``)
the draft-model registry is absent, as it was there.

Stand-in (not in the excerpt): ``register_config_loader`` (modeling_utils.py, index id 57359368733)."""

from typing import Dict as _Dict

from ..pinned_gate import OLD
from ..modules.decoder_model import _excerpt_namespace
from ._arch_index import MODEL_ARCH_TO_MODULE  # noqa: F401  (read by the excerpt's _ensure_model_registered)

_ns = _excerpt_namespace(__name__, MODEL_ARCH_TO_MODULE)
for _name, _value in _ns.items():
    if not _name.startswith("__") and _name not in ("DecoderModel", "DecoderModelForCausalLM", "PPInitCaller",
                                                     "PostInitCaller", "TModel"):
        globals()[_name] = _value
FUSED_MODULE_COMPONENTS = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
if OLD:  # the release before the draft-model registry
    del register_draft_model, get_registered_draft_model_builder, _ensure_draft_model_registered  # noqa: F821

MODEL_CLASS_CONFIG_LOADER_DEFAULT_MAPPING: _Dict[str, type] = MODEL_CLASS_CONFIG_LOADER_DEFAULT_MAPPING  # noqa: F821


def register_config_loader(name: str):
    """Stand-in for ``register_config_loader`` (modeling_utils.py, index id 57359368733). Exists, but the
    drafter config is built by ``ModelConfig.from_pretrained`` (modeling_speculative.py
    ``external_drafter_config_kwargs`` passes no ``checkpoint_format``), so a loader registered here
    never sees a drafter."""

    def decorator(cls):
        MODEL_CLASS_CONFIG_LOADER_DEFAULT_MAPPING[name] = cls
        return cls

    return decorator


from ..modules.decoder_model import DecoderModel, DecoderModelForCausalLM  # noqa: E402,F401
