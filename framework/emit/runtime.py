"""What an emitted package runs when TensorRT-LLM imports it: :func:`install`.

The package's Python is fixed text (:mod:`.fixed`), the same for every adapter; it hands its
folder to :func:`install`, which

1. reads and validates ``resolved.json`` (:class:`~.binding.PackagedDrafter`, :mod:`.names`)
   before importing anything of TensorRT-LLM;
2. refuses a TensorRT-LLM older than :data:`TRTLLM_MINIMUM_VERSION`;
3. refuses, in one line, an architecture TensorRT-LLM itself already registers (a native
   class would otherwise be mixed with our backbone and converted checkpoint in processes
   that never imported this package);
4. registers the backbone (generated: :mod:`.trtllm_backbone`; or a TensorRT-LLM class the
   spec names, validated by :func:`~.names.check_backbone`) under the architecture;
5. registers a draft-model builder for the decoding type that returns the drafter class for
   this architecture and defers to the previously registered builder for any other;
6. with a ``target_architecture`` (``draftsmith emit target_architecture=``), registers, under that
   architecture, TensorRT-LLM's own built-in target class unchanged (:func:`register_target`: a
   subclass with an empty body whose only difference is ``__module__``). That is what carries this
   package into TensorRT-LLM's worker processes: the serving process exports the architecture ->
   module map (``export_external_model_modules``), a worker declares it
   (``register_external_model_modules``), and the worker's first lookup, the target's architecture,
   imports this module (an external declaration outranks the static index in
   ``_ensure_model_registered``) before the target's constructor asks for the draft-model builder,
   so the builder a worker finds is this package's (an external registration outranks the built-in
   ``_build_dflash_draft`` / ``_build_dspark_draft``, which only fill an empty slot).

A DFlash 2 drafter's class also overrides ``select_candidate_path`` (the record's unary
transform on the worker's top-k logits before TensorRT-LLM's own selector); its block decode
scales the block embeddings by ``input_embedding_scale`` (:mod:`.forward`).

A second :func:`install` of the same folder returns the first result.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ...lowering.base import DEVICE_CLASSES
from ..runtime.dflash2 import UnaryTransform
from .binding import PackagedDrafter, check_engine_version, device_class_of
from .names import GENERATED, check_backbone
from .trtllm_backbone import backbone_class, rope_positions

#: The TensorRT-LLM release the emitted package needs at least (the draft-model registry and
#: the modeling_dspark split).
TRTLLM_MINIMUM_VERSION = "1.4.0rc1"
#: decoding type -> (module, class) of TensorRT-LLM's drafter base (closed).
DECODING_BASES = {
    "DFlash": ("tensorrt_llm._torch.models.modeling_dflash", "DFlashForCausalLM"),
    "DSpark": ("tensorrt_llm._torch.models.modeling_dspark", "GQADSparkForCausalLM"),
}
#: decoding type -> SpeculativeDecodingMode member.
MODES = {"DFlash": "DFLASH", "DSpark": "DSPARK"}
REGISTRY_MODULE = "tensorrt_llm._torch.models.modeling_utils"
#: TensorRT-LLM's built-in model zoo (``_arch_index._ZOO_PACKAGE``).
ZOO_PACKAGE = "tensorrt_llm._torch.models"
SPEC_MODE_MODULE = "tensorrt_llm._torch.speculative.interface"


@dataclass
class Installed:
    """What :func:`install` registered."""

    drafter: PackagedDrafter
    architecture: str
    max_draft_len: int
    drafter_class: type
    builder: Callable
    backbone: Any
    #: TensorRT-LLM's target class re-registered under ``target_architecture`` (None: none given)
    target_class: Optional[type] = None


_INSTALLED: dict[str, Installed] = {}


def install(package_dir: "str | Path", module_name: str = __name__) -> Installed:
    """Register the package at ``package_dir`` with TensorRT-LLM (see the module docstring).
    ``module_name``: the emitted module's ``__name__``; the registered classes and builder
    carry it as ``__module__``, so TensorRT-LLM hands a worker process the module that
    installs them (``export_external_model_modules``)."""
    key = str(Path(package_dir).resolve())
    if key in _INSTALLED:
        return _INSTALLED[key]
    drafter = PackagedDrafter.from_package(package_dir)
    try:
        trt = importlib.import_module("tensorrt_llm")
    except ModuleNotFoundError as e:
        if e.name != "tensorrt_llm":
            raise
        raise ImportError(f"{drafter.package} is a TensorRT-LLM custom model module: tensorrt_llm (>= "
                          f"{TRTLLM_MINIMUM_VERSION}) is not importable in this Python ({sys.executable}); import it "
                          "where TensorRT-LLM runs (trtllm-serve --custom_module_dirs)") from None
    check_engine_version(str(getattr(trt, "__version__", "0")), TRTLLM_MINIMUM_VERSION, drafter.package)
    mu = importlib.import_module(REGISTRY_MODULE)
    refuse_native(drafter.architecture, mu)
    base_module, base_name = DECODING_BASES[drafter.decoding_type]
    base = getattr(importlib.import_module(base_module), base_name)
    cls = drafter_class(base, drafter, module_name)
    backbone = register_backbone(drafter, mu, module_name)
    mode = getattr(importlib.import_module(SPEC_MODE_MODULE).SpeculativeDecodingMode, MODES[drafter.decoding_type])
    builder = make_builder(drafter, cls, mu.get_registered_draft_model_builder(mode), module_name)
    mu.register_draft_model(mode)(builder)
    target = register_target(drafter, mu, module_name) if drafter.target_architecture else None
    done = Installed(drafter, drafter.architecture, drafter.resolved.max_draft_len, cls, builder, backbone, target)
    _INSTALLED[key] = done
    return done


def refuse_native(architecture: str, mu: Any) -> None:
    """ImportError in one line when TensorRT-LLM registers ``architecture`` itself (a class from
    a ``tensorrt_llm.`` module) or another package already did."""
    lookup = getattr(mu, "get_registered_model_class", None)
    found = lookup(architecture) if lookup is not None else getattr(mu, "MODEL_CLASS_MAPPING", {}).get(architecture)
    if found is None:
        return
    where = f"{getattr(found, '__module__', '?')}.{getattr(found, '__qualname__', found)}"
    if where.startswith("tensorrt_llm."):
        raise ImportError(f"TensorRT-LLM registers architecture {architecture!r} natively ({where}); serve this "
                          "drafter with TensorRT-LLM's own class, not a draftsmith package (refusing to mix them)")
    raise ImportError(f"architecture {architecture!r} is already registered by {where}; import one package per "
                      "architecture")


def _builtin_target(architecture: str, mu: Any, package: str) -> type:
    """TensorRT-LLM's own class for ``architecture``, imported from its model zoo through the
    static index (never through ``get_registered_model_class``: in a worker that lookup is what is
    importing this package). ImportError in one line when it has none or another package holds it."""
    found = getattr(mu, "MODEL_CLASS_MAPPING", {}).get(architecture)
    if found is None:
        index = getattr(mu, "MODEL_ARCH_TO_MODULE", None)
        if index is None:
            index = getattr(importlib.import_module(f"{ZOO_PACKAGE}._arch_index"), "MODEL_ARCH_TO_MODULE", {})
        module = index.get(architecture)
        if module is None:
            raise ImportError(f"{package}: target_architecture {architecture!r} is not one of TensorRT-LLM's built-in "
                              "architectures (its MODEL_ARCH_TO_MODULE index); re-emit with the target's "
                              "config.json architectures[0]")
        importlib.import_module(f"{ZOO_PACKAGE}.{module}")
        found = mu.MODEL_CLASS_MAPPING.get(architecture)
    where = f"{getattr(found, '__module__', '?')}.{getattr(found, '__qualname__', found)}"
    if found is None or not where.startswith(ZOO_PACKAGE + "."):
        raise ImportError(f"{package}: target_architecture {architecture!r} is registered by {where}, not by "
                          "TensorRT-LLM's model zoo; import one package per target architecture")
    return found


def register_target(drafter: PackagedDrafter, mu: Any, module_name: str = __name__) -> type:
    """Register TensorRT-LLM's own target class under ``drafter.target_architecture`` again, as a
    subclass with an empty body (same name, qualname and docstring; only ``__module__`` is this
    module's), so ``export_external_model_modules`` names this module for the target's
    architecture and a worker's first lookup imports it. The target's math is TensorRT-LLM's class,
    unchanged: the subclass defines nothing but what ``register_auto_model`` records."""
    arch = drafter.target_architecture
    builtin = _builtin_target(arch, mu, drafter.package)
    cls = types.new_class(builtin.__name__, (builtin,), exec_body=lambda ns: ns.update(
        __module__=module_name, __qualname__=builtin.__qualname__, __doc__=builtin.__doc__))
    return mu.register_auto_model(arch)(cls)


def register_backbone(drafter: PackagedDrafter, mu: Any, module_name: str = __name__):
    """The backbone class registered under the architecture (None when the package registers none)."""
    name = check_backbone(drafter.backbone, "resolved.json backbone")
    if name is None:
        return None
    if name == GENERATED:
        return backbone_class(drafter.architecture, drafter, module_name)
    module, cls_name = name.split(":")
    base = getattr(importlib.import_module(module), cls_name)
    cls = type("DraftsmithBackbone", (base,), {"__doc__": "The backbone named at emission, under the drafter "
                                                          "architecture.", "__module__": module_name})
    return mu.register_auto_model(drafter.architecture)(cls)


def _bound(model):
    """The checkpoint's compiled drafter, bound once per drafter module."""
    bound = vars(model).get("_draftsmith_bound")
    if bound is None:
        bound = vars(model)["_draftsmith_bound"] = model._draftsmith_package.bind(model.config)
    return bound


def drafter_class(base: type, drafter: PackagedDrafter, module_name: str = __name__) -> type:
    """``base`` (TensorRT-LLM's DFlash/DSpark drafter) whose masks and block attention come from
    the compiled drafter."""

    def _get_attention_mask_args(self, layer_idx):
        """``(causal, (left, right))`` of layer ``layer_idx`` as trained."""
        return _bound(self).mask_args(layer_idx)

    def _resolve_block_attention(self, layer_idx):
        """The trained mask, with no window substitution."""
        return _bound(self).mask_args(layer_idx)

    def validate_block_attention_windows(self):
        """TensorRT-LLM's check, then whether the spec's lowerings run on this device (one line)."""
        base.validate_block_attention_windows(self)
        device = device_class_of(self)
        if device not in DEVICE_CLASSES:
            raise ValueError(f"{drafter.adapter}: no lowering table for device class {device} (known: "
                             f"{', '.join(DEVICE_CLASSES)}); re-emit with a lowering for it")
        _bound(self).check_combination(self.dflash_attention_backend, device)

    def dflash_forward(self, noise_embedding, query_positions, num_ctx_per_req, ctx_k_cache, ctx_v_cache,
                       ctx_cache_batch_idx, ctx_kv_cache=None, ctx_page_table=None):
        """The block decode with each layer's attention through its draftsmith lowering (per rank)."""
        decode = vars(self).get("_draftsmith_decode")
        if decode is None:
            decode = vars(self)["_draftsmith_decode"] = _bound(self).block_decode(device_class_of(self),
                                                                                  rope_positions(self.config))
        return decode(self, noise_embedding, query_positions, num_ctx_per_req, ctx_k_cache, ctx_v_cache,
                      ctx_cache_batch_idx, ctx_kv_cache, ctx_page_table)

    body = dict(
        __doc__=f"{base.__name__} whose masks and block attention come from the compiled drafter.",
        __module__=module_name,
        _draftsmith_package=drafter,
        _get_attention_mask_args=_get_attention_mask_args,
        _resolve_block_attention=_resolve_block_attention,
        validate_block_attention_windows=validate_block_attention_windows,
        dflash_forward=dflash_forward,
    )
    d2 = drafter.resolved.dflash2
    if d2 is not None:
        u = d2.selector.unary
        unary = UnaryTransform(u.multiplier, u.softcap, u.order)

        def select_candidate_path(self, block_logits, candidate_ids, unary_logits, block_hidden_states,
                                  anchor_token_ids):
            """TensorRT-LLM's selector on the drafter's unary scores: ``unary_logits`` (the worker's
            top-k lm_head logits, ``[B, K, k]``) through the record's unary transform (monotone, so the
            worker's top-k candidates and their order stand), then TensorRT-LLM's own
            ``select_candidate_path``, whose rows are ``-inf`` but the walk's realized scores (it
            overwrites ``block_logits``)."""
            return base.select_candidate_path(self, block_logits, candidate_ids, unary(unary_logits),
                                              block_hidden_states, anchor_token_ids)

        body["select_candidate_path"] = select_candidate_path
    return type("DraftsmithDrafter", (base,), body)


def make_builder(drafter: PackagedDrafter, cls: type, previous: Any, module_name: str = __name__) -> Callable:
    """The draft-model builder: ``cls`` for this architecture, ``previous`` for any other."""

    def build_draft_model(model_config, draft_config, lm_head, model):
        architectures = getattr(draft_config.pretrained_config, "architectures", None) or []
        if drafter.architecture not in architectures:
            if previous is None:
                raise ValueError(f"no draft-model builder for architectures {architectures!r} (this package "
                                 f"serves {drafter.architecture!r})")
            return previous(model_config, draft_config, lm_head, model)
        bound = drafter.bind(draft_config.pretrained_config)  # refuses an unconverted checkpoint in one line
        dm = cls(draft_config, dflash_attention_backend=model_config.spec_config.attention_backend)
        if bound.resolved.dflash2 is not None and getattr(dm, "is_dflash2", None) is not True:
            raise ValueError(f"{drafter.adapter}: a DFlash 2 drafter, but this TensorRT-LLM's {type(dm).__mro__[1].__name__} "
                             "did not detect DFlash 2 from the converted config (it needs the DFlash 2 path of "
                             "modeling_dflash.py: dflash_config.conv_kernel_size / selector_rank)")
        return dm

    build_draft_model.__module__ = module_name
    return build_draft_model

