"""``draftsmith emit``: write a Python package TensorRT-LLM loads as a custom model module.

``emit(adapter, target="trtllm", out=DIR)`` writes ``DIR/<package>/``:

- ``__init__.py``: re-exports the module below, so importing the package registers it;
- ``drafter.py``: rendered from :data:`DRAFTER_TEMPLATE`; it imports the adapter and
  draftsmith at run time and holds no conversion logic;
- ``speculative_config.yaml``: the ``speculative_config`` snippet;
- ``PASTE.md``: the architecture-index row and telemetry-allowlist entry, for a user who
  adds the drafter to a TensorRT-LLM checkout.

The engine names the module imports are parameters (``base_module``, ``base_class``,
``registry_module``, ``spec_mode_module``, ``config_utils_module``, ``backbone``), so the
same text runs against the torch reference host in tests. ``max_draft_len`` is derived
(block size ``B``: ``B`` if ``sample_from_anchor`` else ``B - 1``) and an explicit value
that contradicts it is refused.
"""

from __future__ import annotations

import json
import py_compile
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any, Optional, Sequence

from ..compile.engine import compile_spec
from ..compile.resolved import LayerPlan, ResolvedDrafter
from ..errors import UserError
from ..io.publish import atomic_dir, publish, remove_temp
from ..io.safe_read import MAX_CONFIG_BYTES, load_json
from ..spec.loading import load_spec
from .binding import file_sha256

TRTLLM_BASE_MODULE = "tensorrt_llm._torch.models.modeling_dspark"
TRTLLM_BASE_CLASS = "GQADSparkForCausalLM"
TRTLLM_REGISTRY_MODULE = "tensorrt_llm._torch.models.modeling_utils"
TRTLLM_SPEC_MODE_MODULE = "tensorrt_llm._torch.speculative.interface"
TRTLLM_CONFIG_UTILS_MODULE = "tensorrt_llm._torch.pyexecutor.config_utils"
DEFAULT = "default"  # sentinel: take the backbone from the spec's engine.trtllm_backbone


@dataclass
class EmitResult:
    """What :func:`emit` wrote and what the user pastes into TensorRT-LLM's config."""

    package_dir: Path
    package: str
    files: list[Path]
    adapter: str
    adapter_file: Path
    sha256: str
    architecture: str
    max_draft_len: int
    speculative_config: str
    arch_index_row: str
    telemetry_entry: str
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The text ``draftsmith emit`` prints."""
        return "\n".join(
            [
                f"wrote {self.package_dir} ({', '.join(p.name for p in self.files)})",
                f"adapter {self.adapter} ({self.adapter_file}, sha256 {self.sha256})",
                f"max_draft_len = {self.max_draft_len}",
                "",
                self.speculative_config.rstrip(),
                "",
                "architecture index row (tensorrt_llm/_torch/models/_arch_index.py, "
                "MODEL_ARCH_TO_MODULE):",
                f"    {self.arch_index_row}",
                "telemetry allowlist entry (tensorrt_llm/usage/architecture_allowlist.py, "
                "PUBLIC_HF_ARCHITECTURES):",
                f"    {self.telemetry_entry}",
                *self.notes,
            ]
        )


def resolve_max_draft_len(flat: dict, explicit: Optional[int] = None) -> tuple[int, str]:
    """``(max_draft_len, reason)`` of a flattened config (its :class:`ResolvedDrafter`);
    refuses an ``explicit`` value that contradicts it."""
    r = ResolvedDrafter.from_config(flat)
    reason = f"block_size {r.block_size}, sample_from_anchor {str(r.sample_from_anchor).lower()}"
    if explicit is not None and explicit != r.max_draft_len:
        raise UserError(f"adapter spec max_draft_len = {explicit} contradicts the derived max_draft_len "
                        f"{r.max_draft_len} ({reason})")
    return r.max_draft_len, reason


def speculative_config_snippet(max_draft_len: int, package: str, extra: Optional[dict] = None) -> str:
    """The ``speculative_config`` YAML for ``trtllm-serve`` / the LLM API (``extra``: the
    adapter's ``docs.serving`` keys)."""
    lines = [
        f"# import {package} in the serving process first (it registers the drafter)",
        "speculative_config:",
        "  decoding_type: DSpark",
        "  speculative_model: /path/to/drafter  # `draftsmith convert` output or the raw checkpoint",
        f"  max_draft_len: {max_draft_len}",
    ]
    fixed = ("decoding_type", "speculative_model", "max_draft_len")
    lines += [f"  {k}: {json.dumps(v)}" for k, v in (extra or {}).items() if k not in fixed]
    return "\n".join(lines) + "\n"


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^0-9A-Za-z]+", name) if p)


def _load_config(path: Optional[Path]) -> Optional[dict]:
    if path is None:
        return None
    path = Path(path)
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        raise UserError(f"{path}: drafter config.json not found")
    return load_json(path, MAX_CONFIG_BYTES, "drafter config.json")


def _emission_config(adapter: Any, config: Optional[Path]) -> dict:
    """The flattened config emission derives ``max_draft_len`` from: ``config`` if given,
    else the adapter's ``synth.config`` (the full-size source config it describes)."""
    raw = _load_config(config)
    if raw is None:
        synth = getattr(getattr(adapter, "spec", None), "synth", None)
        raw = getattr(synth, "config", None)
    if raw is None:
        raise UserError(f"adapter {adapter.name}: no synth.config; pass config=<drafter config.json>")
    return raw if "draftsmith" in raw else adapter.flatten_config(dict(raw))


def _split_class(path: str, what: str) -> tuple[str, str]:
    module, sep, cls = path.partition(":")
    if not sep or not module or not cls.isidentifier():
        raise UserError(f"{what}: {path!r} is not 'package.module:ClassName'")
    return module, cls


def render(values: dict[str, Any]) -> str:
    """The text of ``drafter.py`` for ``values`` (see :data:`DRAFTER_TEMPLATE`)."""
    return Template(DRAFTER_TEMPLATE).substitute(values)


@dataclass(frozen=True)
class EngineNames:
    """Where the emitted module imports its engine names from (TensorRT-LLM by default).

    ``base``/``backbone``: ``"package.module:ClassName"``; ``backbone=None`` registers none.
    """

    base: str = f"{TRTLLM_BASE_MODULE}:{TRTLLM_BASE_CLASS}"
    registry_module: str = TRTLLM_REGISTRY_MODULE
    spec_mode_module: str = TRTLLM_SPEC_MODE_MODULE
    config_utils_module: str = TRTLLM_CONFIG_UTILS_MODULE
    backbone: Optional[str] = None


def emit(
    adapter: str,
    target: str = "trtllm",
    out: Path = Path("out"),
    base_module: str = TRTLLM_BASE_MODULE,
    adapter_dir: Optional[Path] = None,
    *,
    base_class: str = TRTLLM_BASE_CLASS,
    registry_module: str = TRTLLM_REGISTRY_MODULE,
    spec_mode_module: str = TRTLLM_SPEC_MODE_MODULE,
    config_utils_module: str = TRTLLM_CONFIG_UTILS_MODULE,
    backbone: Optional[str] = DEFAULT,
    config: Optional[Path] = None,
    overrides: Sequence[str] = (),
    package: Optional[str] = None,
) -> EmitResult:
    """Write the custom-model package for ``adapter`` into ``out`` and return what was written.

    ``backbone``: ``"module:Class"`` registered under the drafter architecture,
    :data:`DEFAULT` for :data:`DEFAULT_BACKBONES`, ``None`` to register none.
    ``config``: a drafter ``config.json`` (or its folder) when the adapter has no example.
    Raises :class:`UserError` on an unknown target, a contradicting ``max_draft_len``, or
    missing inputs.
    """
    if target != "trtllm":
        raise UserError(f"target={target!r}: unknown; known: trtllm")
    spec, yaml_path = load_spec(adapter, list(overrides), adapter_dir=adapter_dir)
    compiled = compile_spec(spec, yaml_path)
    engine = EngineNames(
        f"{base_module}:{base_class}", registry_module, spec_mode_module, config_utils_module,
        default_engine(compiled, backbone).backbone,
    )
    return write_package(
        compiled, Path(yaml_path), Path(out), engine, config=config, overrides=overrides,
        package=package, explicit_max_draft_len=getattr(spec, "max_draft_len", None),
    )


def default_engine(adapter: Any, backbone: Optional[str] = DEFAULT) -> EngineNames:
    """TensorRT-LLM's names, with ``backbone`` resolved (:data:`DEFAULT`: the compiled
    ``adapter``'s ``engine.trtllm_backbone``)."""
    if backbone == DEFAULT:
        backbone = adapter.spec.engine.trtllm_backbone
        if backbone is None:
            raise UserError(
                f"adapter {adapter.name}: no engine.trtllm_backbone; pass backbone='module:Class' "
                "(the engine class that builds the drafter's layers) or backbone=None"
            )
    return EngineNames(backbone=backbone)


def spec_overrides(adapter: Any, adapter_dir: Optional[Path] = None) -> list[str]:
    """``adapter.*`` overrides that turn the adapter file's spec into ``adapter.spec``
    (for a module emitted from a command line; checked at run time by spec sha256)."""
    base, _ = load_spec(adapter.name, adapter_dir=adapter_dir)

    def leaves(d, prefix=""):
        out = {}
        for k, v in d.items():
            key = f"{prefix}{k}"
            out.update(leaves(v, key + ".") if isinstance(v, dict) and v else {key: v})
        return out

    dump = dict(mode="json", by_alias=True)
    a, b = leaves(base.model_dump(**dump)), leaves(adapter.spec.model_dump(**dump))
    changed = [f"{k}={json.dumps(v)}" for k, v in sorted(b.items()) if k not in a or a[k] != v]
    return changed + [f"~{k}" for k in sorted(set(a) - set(b))]


def write_package(
    adapter: Any,
    yaml_path: Path,
    out: Path,
    engine: EngineNames = EngineNames(),
    *,
    config: Optional[Path] = None,
    overrides: Sequence[str] = (),
    package: Optional[str] = None,
    explicit_max_draft_len: Optional[int] = None,
) -> EmitResult:
    """Render and write the package for a compiled ``adapter`` (needs ``name``,
    ``architectures``, ``flatten_config``) whose spec file is ``yaml_path``."""
    flat = _emission_config(adapter, config)
    max_draft_len, reason = resolve_max_draft_len(flat, explicit_max_draft_len)
    architecture = adapter.architectures[0]
    package = package or f"draftsmith_{re.sub(r'[^0-9a-zA-Z_]', '_', adapter.name)}"
    if not package.isidentifier():
        raise UserError(f"package={package!r}: not a Python identifier")
    base_module, base_class = _split_class(engine.base, "base")
    yaml_path = Path(yaml_path).resolve()
    sha = file_sha256(yaml_path)
    drafter_class = _camel(adapter.name) + "Drafter"

    backbone_line, backbone_import, backbone_block = "none registered", "", ""
    if engine.backbone:
        bb_module, bb_class = _split_class(engine.backbone, "backbone")
        backbone_line = f"{bb_module}.{bb_class}"
        backbone_import = f"from {bb_module} import {bb_class}\n"
        backbone_block = Template(BACKBONE_BLOCK).substitute(
            backbone_class=_camel(architecture) + "Backbone", backbone_base=bb_class
        )

    registry_names = ["get_registered_draft_model_builder", "register_draft_model"]
    if engine.backbone:
        registry_names.insert(1, "register_auto_model")
    registry_import = f"from {engine.registry_module} import (\n" + "".join(
        f"    {n},\n" for n in registry_names
    ) + ")"
    values = dict(
        layer_lines=_layer_lines(ResolvedDrafter.from_config(flat).layers),
        registry_import=registry_import,
        adapter=adapter.name,
        adapter_file=str(yaml_path),
        sha256=sha,
        architecture=architecture,
        base_module=base_module,
        base_class=base_class,
        backbone_line=backbone_line,
        max_draft_len=max_draft_len,
        mdl_reason=reason,
        drafter_class=drafter_class,
        registry_module=engine.registry_module,
        spec_mode_module=engine.spec_mode_module,
        config_utils_module=engine.config_utils_module,
        backbone_import=backbone_import,
        backbone_block=backbone_block,
        adapter_repr=repr(adapter.name),
        adapter_file_repr=repr(str(yaml_path)),
        sha256_repr=repr(sha),
        overrides_repr=repr(list(overrides)),
        spec_sha256_repr=repr(getattr(adapter, "spec_sha256", None)),
        architecture_repr=repr(architecture),
    )
    serving = getattr(getattr(getattr(adapter, "spec", None), "docs", None), "serving", None)
    snippet = speculative_config_snippet(max_draft_len, package, serving)
    arch_row = f'"{architecture}": "modeling_{package}",'
    telemetry = f'"{architecture}",'
    files = {
        "__init__.py": Template(INIT_TEMPLATE).substitute(values),
        "drafter.py": render(values),
        "speculative_config.yaml": snippet,
        "PASTE.md": _paste_text(package, arch_row, telemetry),
    }
    # Written and compiled in a temp dir beside the package, then renamed into place (a
    # re-emit replaces the package whole; a failure leaves the old one untouched).
    pkg_dir = Path(out) / package
    tmp = atomic_dir(pkg_dir, overwrite=True, command="emit")
    try:
        for name, text in files.items():
            (tmp / name).write_text(text)
            if name.endswith(".py"):
                py_compile.compile(str(tmp / name), cfile=str(tmp / "__pycache__" / f"{name}c"), doraise=True)
        shutil.rmtree(tmp / "__pycache__", ignore_errors=True)
        publish(tmp, pkg_dir, overwrite=True)
    except BaseException:
        remove_temp(tmp)
        raise
    return EmitResult(
        package_dir=pkg_dir,
        package=package,
        files=[pkg_dir / name for name in files],
        adapter=adapter.name,
        adapter_file=yaml_path,
        sha256=sha,
        architecture=architecture,
        max_draft_len=max_draft_len,
        speculative_config=snippet,
        arch_index_row=arch_row,
        telemetry_entry=telemetry,
        notes=[
            "never run inside TensorRT-LLM; tested only against draftsmith's torch host "
            "(docs/serving-on-trtllm.md)"
        ],
    )


def _layer_lines(layers: Sequence[LayerPlan]) -> str:
    """One header line per run of identical layers: mask, then lowering per device class."""
    runs: list[list] = []
    for i, layer in enumerate(layers):
        if runs and runs[-1][1] == layer:
            runs[-1][0].append(i)
        else:
            runs.append([[i], layer])
    lines = []
    for idx, layer in runs:
        span = f"{idx[0]}-{idx[-1]}" if len(idx) > 1 else f"{idx[0]}"
        mask = "causal" if layer.mask.causal else "non-causal"
        mask += f", window {layer.mask.window}" if layer.mask.window else ", full"
        low = ", ".join(f"{k} {v}" for k, v in layer.lowering.items())
        lines.append(f"  - {span}: {mask} -> {low}")
    return "\n".join(lines)


def _paste_text(package: str, arch_row: str, telemetry: str) -> str:
    return (
        "# Rows for a TensorRT-LLM checkout\n\n"
        "Not needed when the package is imported from outside TensorRT-LLM (the usual way).\n"
        f"Only if `drafter.py` is copied into `tensorrt_llm/_torch/models/` as\n"
        f"`modeling_{package}.py`. Caveat: inside the zoo its DSpark builder counts as\n"
        "built-in and does not replace the built-in one (docs/trtllm-interface.md).\n\n"
        "`tensorrt_llm/_torch/models/_arch_index.py`, `MODEL_ARCH_TO_MODULE`:\n\n"
        f"    {arch_row}\n\n"
        "`tensorrt_llm/usage/architecture_allowlist.py`, `PUBLIC_HF_ARCHITECTURES`:\n\n"
        f"    {telemetry}\n"
    )


BACKBONE_BLOCK = '''

@register_auto_model(ARCHITECTURE)
class $backbone_class($backbone_base):
    """The drafter's backbone, registered under its architecture.

    The DFlash base resolves its layers from ``config.json``'s ``architectures[0]``.
    """
'''


INIT_TEMPLATE = '''"""draftsmith adapter ``$adapter`` as a TensorRT-LLM custom model module.

Generated by ``draftsmith emit``; importing this package registers the drafter
(see ``drafter.py``).

- adapter file: $adapter_file
- adapter sha256: $sha256
"""

from .drafter import (
    ADAPTER,
    ARCHITECTURE,
    MAX_DRAFT_LEN,
    $drafter_class,
    build_draft_model,
    install_config_route,
    route_config,
)

__all__ = [
    "ADAPTER",
    "ARCHITECTURE",
    "MAX_DRAFT_LEN",
    "$drafter_class",
    "build_draft_model",
    "install_config_route",
    "route_config",
]
'''

DRAFTER_TEMPLATE = '''"""TensorRT-LLM custom model module for the draftsmith adapter ``$adapter``.

Generated by ``draftsmith emit``; do not edit, re-emit after changing the adapter.

- adapter file: $adapter_file
- adapter sha256: $sha256
- drafter architecture: $architecture
- drafter base class: $base_module.$base_class
- backbone class: $backbone_line
- max_draft_len: $max_draft_len ($mdl_reason)
- layers (mask -> lowering per device class, from the adapter):
$layer_lines

Importing it registers the backbone under the drafter architecture and a DSpark
draft-model builder that returns :class:`$drafter_class` for this architecture (other
DSpark drafters keep the builder that was registered before). Weight conversion, masks
and lowerings come from the adapter file at run time, through draftsmith.
"""

from draftsmith.framework.emit.binding import AdapterBinding, device_class
import $config_utils_module as engine_config_utils
from $base_module import $base_class
$registry_import
from $spec_mode_module import SpeculativeDecodingMode
$backbone_import
ADAPTER = AdapterBinding(
    adapter=$adapter_repr,
    adapter_file=$adapter_file_repr,
    sha256=$sha256_repr,
    overrides=$overrides_repr,
    spec_sha256=$spec_sha256_repr,
)
ARCHITECTURE = $architecture_repr
MAX_DRAFT_LEN = $max_draft_len


class $drafter_class($base_class):
    """``$base_class`` whose weights, masks and lowerings come from the adapter."""

    def load_weights(self, weights, weight_mapper=None, **kwargs):
        """Convert ``weights`` to the target layout, then hand them to the parent loader.

        ``weight_mapper`` is a named parameter on purpose: TensorRT-LLM passes it only to
        a loader whose signature names it. Converted checkpoints pass through unchanged.
        """
        converted = ADAPTER.convert(weights, self.config)
        return super().load_weights(converted, weight_mapper=weight_mapper, **kwargs)

    def _get_attention_mask_args(self, layer_idx):
        """``(causal, (left, right))`` of layer ``layer_idx``, as the adapter resolved it."""
        return ADAPTER.mask_args(self.config, layer_idx)

    def validate_block_attention_windows(self):
        """Each layer's lowering on this device (the table above), instead of refusing
        non-causal windows the way TensorRT-LLM's TRTLLM backend check does."""
        return ADAPTER.lowerings(self.config, device_class())

    @property
    def draftsmith_needs_context_kernel(self):
        """Whether any layer's lowering on this device needs the engine's context kernel."""
        return ADAPTER.needs_context_kernel(self.config, device_class())

    def draftsmith_block_attention(self, layer_idx, q, cache, k_blk, v_blk, scale):
        """Block attention of layer ``layer_idx`` through its draftsmith lowering."""
        return ADAPTER.block_attention(self.config, layer_idx, q, cache, k_blk, v_blk, scale)
$backbone_block

PREVIOUS_DSPARK_BUILDER = get_registered_draft_model_builder(SpeculativeDecodingMode.DSPARK)


@register_draft_model(SpeculativeDecodingMode.DSPARK)
def build_draft_model(model_config, draft_config, lm_head, model):
    """The DSpark builder: this drafter for its architecture, else the previous builder."""
    architectures = getattr(draft_config.pretrained_config, "architectures", None) or []
    if ARCHITECTURE not in architectures and PREVIOUS_DSPARK_BUILDER is not None:
        return PREVIOUS_DSPARK_BUILDER(model_config, draft_config, lm_head, model)
    backend = model_config.spec_config.attention_backend
    return $drafter_class(draft_config, dflash_attention_backend=backend)


def route_config(raw):
    """The flattened config if ``raw`` (a ``config.json`` dict) is this drafter's, else None."""
    return ADAPTER.route_config(raw)


def install_config_route():
    """Opt-in: make the engine's config loader return the flattened config for this drafter.

    TensorRT-LLM has no registration hook for config routing, so this replaces
    ``load_pretrained_config`` in its module; code that imported the function earlier
    keeps the original.
    """
    original = engine_config_utils.load_pretrained_config
    engine_config_utils.load_pretrained_config = ADAPTER.routed_config_loader(original)
'''
