"""``draftsmith emit``: write a Python package TensorRT-LLM loads as a custom model module.

``emit(adapter, target="trtllm", out=DIR)`` writes ``DIR/<package>/``:

- ``__init__.py``: checks the TensorRT-LLM version (one line naming the pinned minimum), then
  imports the module below, so importing the package registers it;
- ``drafter.py``: rendered from :data:`DRAFTER_TEMPLATE`: the drafter class (DFlash or DSpark
  base by the drafter's heads), its builder and, by default, a backbone class generated from
  the spec out of TensorRT-LLM's building blocks; no conversion logic, no path, no hash;
- ``resolved.json``: the compiled drafter (:class:`ResolvedDrafter` dump) as data;
- ``speculative_config.yaml``: the ``speculative_config`` snippet;
- ``PASTE.md``: the architecture-index row and telemetry-allowlist entry.

The requirements it meets are tests/conformance/trtllm/CONTRACT.md (R1-R10). ``max_draft_len``
is derived (block size ``B``: ``B`` if ``sample_from_anchor`` else ``B - 1``) and an explicit
value that contradicts it is refused.
"""

from __future__ import annotations

import hashlib
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
from ..layer_ranges import format_ranges
from ..io.publish import atomic_dir, publish, remove_temp
from ..io.safe_read import MAX_CONFIG_BYTES, load_json
from ..spec.loading import load_spec
from .binding import PACKAGE_DATA, rope_scaling_problem

#: The TensorRT-LLM release the emitted package needs at least (the draft-model registry and
#: the modeling_dspark split; tests/conformance/trtllm/CONTRACT.md, "Pinned minimum").
TRTLLM_MINIMUM_VERSION = "1.4.0rc1"
DECODING_BASES = {
    "DFlash": "tensorrt_llm._torch.models.modeling_dflash:DFlashForCausalLM",
    "DSpark": "tensorrt_llm._torch.models.modeling_dspark:GQADSparkForCausalLM",
}
TRTLLM_REGISTRY_MODULE = "tensorrt_llm._torch.models.modeling_utils"
TRTLLM_SPEC_MODE_MODULE = "tensorrt_llm._torch.speculative.interface"
DEFAULT = "default"  # sentinel: the spec's engine.trtllm_backbone, else the generated backbone
GENERATED = "generated"  # backbone generated from the spec out of TensorRT-LLM's building blocks
#: attention_backend the snippet names (valid in the pinned version: AUTO|VANILLA|TRTLLM|CUTEDSL).
SNIPPET_ATTENTION_BACKEND = "VANILLA"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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
    decoding_type: str = "DSpark"
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The text ``draftsmith emit`` prints."""
        return "\n".join(
            [
                f"wrote {self.package_dir} ({', '.join(p.name for p in self.files)})",
                f"adapter {self.adapter} ({self.adapter_file}), decoding_type {self.decoding_type}",
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


def speculative_config_snippet(max_draft_len: int, package: str, extra: Optional[dict] = None,
                               resolved: Optional[ResolvedDrafter] = None) -> str:
    """The ``speculative_config`` YAML for ``trtllm-serve`` / the LLM API (``extra``: the
    adapter's ``docs.serving`` keys; ``resolved``: the drafter whose keys it states)."""
    dtype = decoding_type(resolved) if resolved is not None else "DSpark"
    lines = [
        f"# trtllm-serve ... --custom_module_dirs <out>/{package}  (imports the package in the serving process)",
        "speculative_config:",
        f"  decoding_type: {dtype}",
        "  speculative_model: /path/to/drafter  # the `draftsmith convert` output",
        f"  max_draft_len: {max_draft_len}",
    ]
    if resolved is not None:
        lines += [f"  block_size: {resolved.block_size}", f"  mask_token_id: {resolved.mask_token_id}",
                  f"  target_layer_ids: {json.dumps(list(resolved.target_layer_ids))}",
                  f"  attention_backend: {SNIPPET_ATTENTION_BACKEND}"]
    fixed = ("decoding_type", "speculative_model", "max_draft_len", "block_size", "mask_token_id",
             "target_layer_ids", "attention_backend")
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

    ``base``: ``"package.module:ClassName"``, None for the decoding type's TensorRT-LLM base;
    ``backbone``: :data:`GENERATED`, a ``"package.module:ClassName"``, or None for none.
    """

    base: Optional[str] = None
    registry_module: str = TRTLLM_REGISTRY_MODULE
    spec_mode_module: str = TRTLLM_SPEC_MODE_MODULE
    backbone: Optional[str] = GENERATED


def emit(
    adapter: str,
    target: str = "trtllm",
    out: Path = Path("out"),
    adapter_dir: Optional[Path] = None,
    *,
    backbone: Optional[str] = DEFAULT,
    config: Optional[Path] = None,
    overrides: Sequence[str] = (),
    package: Optional[str] = None,
) -> EmitResult:
    """Write the custom-model package for ``adapter`` into ``out`` and return what was written.

    ``backbone``: :data:`DEFAULT` (the spec's ``engine.trtllm_backbone``, else generated),
    :data:`GENERATED`, ``"module:Class"``, or ``None`` to register none. ``config``: the
    drafter ``config.json`` (or its folder) the snippet describes; default the adapter's
    ``synth.config``. Raises :class:`UserError` on an unknown target, a contradicting
    ``max_draft_len``, or missing inputs.
    """
    if target != "trtllm":
        raise UserError(f"target={target!r}: unknown; known: trtllm")
    spec, yaml_path = load_spec(adapter, list(overrides), adapter_dir=adapter_dir)
    compiled = compile_spec(spec, yaml_path)
    return write_package(
        compiled, Path(yaml_path), Path(out), default_engine(compiled, backbone), config=config,
        overrides=overrides, package=package, explicit_max_draft_len=getattr(spec, "max_draft_len", None),
    )


def default_engine(adapter: Any, backbone: Optional[str] = DEFAULT) -> EngineNames:
    """TensorRT-LLM's names, with ``backbone`` resolved (:data:`DEFAULT`: the compiled
    ``adapter``'s ``engine.trtllm_backbone``, else :data:`GENERATED`)."""
    if backbone == DEFAULT:
        backbone = getattr(getattr(adapter.spec, "engine", None), "trtllm_backbone", None) or GENERATED
    if backbone not in (None, GENERATED):
        _split_class(backbone, "backbone")
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


def decoding_type(r: ResolvedDrafter) -> str:
    """``DFlash`` for a drafter with no DSpark head and no shift (TensorRT-LLM's DFlash reads
    slots ``1..K``), else ``DSpark``."""
    heads = r.heads
    return "DSpark" if (r.sample_from_anchor or heads.markov_rank or heads.confidence) else "DFlash"


def check_engine_norms(r: ResolvedDrafter, where: str) -> None:
    """TensorRT-LLM applies ``hidden_norm`` (``nn.RMSNorm``) and the stacked ``k_norm`` of
    ``precompute_context_kv`` plainly (modeling_dflash.py @ d70a2287): both must be stored folded."""
    gemma = [k for k in ("hidden_norm", "k_norm") if r.norms[k] == "gemma"]
    if gemma:
        raise UserError(f"{where}: {', '.join(gemma)} stored Gemma-style; TensorRT-LLM applies them plainly "
                        "(fold them with norm_fold_gemma mode: fold)")


def check_engine_rope(r: ResolvedDrafter, where: str) -> None:
    """A scaled RoPE is refused at emit time (and again when a package binds a checkpoint):
    see :func:`~.binding.rope_scaling_problem`."""
    problem = rope_scaling_problem(r)
    if problem:
        raise UserError(f"{where}: {problem}")


def worker_mask_problems(r: ResolvedDrafter) -> list[str]:
    """Layers whose mask TensorRT-LLM's built-in classes cannot resolve from the converted config
    (a worker process builds those; CONTRACT.md R2): causal full layers (only DFlash 2 honours
    ``is_causal``) and causal windows next to non-causal ones (one ``use_sliding_window`` flag)."""
    out = []
    causal_full = [i for i, m in enumerate(r.masks) if m.causal and m.window is None]
    if causal_full:
        out.append(f"layers {causal_full}: causal full attention")
    win = {m.causal for m in r.masks if m.window is not None}
    if len(win) > 1:
        out.append("causal and non-causal windowed layers together")
    return out


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
    resolved = ResolvedDrafter.from_config(flat)
    check_engine_norms(resolved, f"adapter {adapter.name}")
    check_engine_rope(resolved, f"adapter {adapter.name}")
    architecture = adapter.architectures[0]
    package = package or f"draftsmith_{re.sub(r'[^0-9a-zA-Z_]', '_', adapter.name)}"
    if not package.isidentifier():
        raise UserError(f"package={package!r}: not a Python identifier")
    dtype = decoding_type(resolved)
    base = engine.base or DECODING_BASES[dtype]
    base_module, base_class = _split_class(base, "base")
    mode = "DFLASH" if dtype == "DFlash" else "DSPARK"
    drafter_class = _camel(adapter.name) + "Drafter"
    values = dict(
        adapter=adapter.name, architecture=architecture, base_module=base_module, base_class=base_class,
        max_draft_len=max_draft_len, mdl_reason=reason, drafter_class=drafter_class,
        layer_lines=_layer_lines(resolved.layers), decoding_type=dtype, mode=mode,
        registry_module=engine.registry_module, spec_mode_module=engine.spec_mode_module,
        minimum=TRTLLM_MINIMUM_VERSION, package=package,
        backbone_line="generated from the spec (below)" if engine.backbone == GENERATED else
        (engine.backbone or "none registered"),
    )
    values["backbone_block"] = _backbone_block(engine.backbone, architecture)
    serving = getattr(getattr(getattr(adapter, "spec", None), "docs", None), "serving", None)
    snippet = speculative_config_snippet(max_draft_len, package, serving, resolved=resolved)
    arch_row = f'"{architecture}": "modeling_{package}",'
    telemetry = f'"{architecture}",'
    data = {"adapter": adapter.name, "architecture": architecture, "decoding_type": dtype,
            "resolved": resolved.section()}
    files = {
        "__init__.py": Template(INIT_TEMPLATE).substitute(values),
        "drafter.py": render(values),
        PACKAGE_DATA: json.dumps(data, indent=1, sort_keys=True) + "\n",
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
        package_dir=pkg_dir, package=package, files=[pkg_dir / name for name in files], adapter=adapter.name,
        adapter_file=Path(yaml_path), sha256=file_sha256(yaml_path) if Path(yaml_path).is_file() else "",
        architecture=architecture, max_draft_len=max_draft_len, speculative_config=snippet,
        arch_index_row=arch_row, telemetry_entry=telemetry, decoding_type=dtype,
        notes=[*(f"warning: {p} -- TensorRT-LLM worker processes (built-in classes) resolve these masks "
                 "wrongly; serve with one process" for p in worker_mask_problems(resolved)),
               "checked against the TensorRT-LLM stand-in of tests/conformance/trtllm; never run inside "
               "TensorRT-LLM itself (docs/serving-on-trtllm.md)"],
    )


def _backbone_block(backbone: Optional[str], architecture: str) -> str:
    if backbone == GENERATED:
        return GENERATED_BACKBONE
    if backbone:
        module, cls = _split_class(backbone, "backbone")
        return Template(NAMED_BACKBONE).substitute(module=module, cls=cls)
    return ""

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
        span = format_ranges(idx)
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


GENERATED_BACKBONE = '''

# -- the backbone, generated from the spec out of TensorRT-LLM's building blocks ---------------
# Every norm gets its own Gemma flag (the converted config's draftsmith.norms); rotary_dim of
# head_dim; swiglu_oai through GatedMLP(swiglu_alpha, swiglu_beta=1, swiglu_limit). Dims are
# read from the checkpoint's draftsmith section only; nothing is CUDA-only.
from torch import nn  # noqa: E402

from tensorrt_llm._torch.models.modeling_utils import (  # noqa: E402
    DecoderModelForCausalLM,
    register_auto_model,
)
from tensorrt_llm._torch.modules.embedding import Embedding  # noqa: E402
from tensorrt_llm._torch.modules.gated_mlp import GatedMLP  # noqa: E402
from tensorrt_llm._torch.modules.linear import Linear  # noqa: E402
from tensorrt_llm._torch.modules.rms_norm import RMSNorm  # noqa: E402
# RotaryEmbedding(rope_params, *, head_dim, is_neox) lives here in the pinned version (amukkara
# modeling_dflash.py @ d70a2287 imports it from this module), which also imports RopeParams
# (NVIDIA attention/rotary_embedding.py @ 047098b7 and @ b744e0a5; tests/conformance/trtllm/CONTRACT.md).
from tensorrt_llm._torch.attention.rotary_embedding import RopeParams, RotaryEmbedding  # noqa: E402


def _norm(r, kind, size):
    return RMSNorm(hidden_size=size, eps=r.rms_norm_eps, use_gemma=r.norms[kind] == "gemma")


class DraftsmithAttention(nn.Module):
    """What DFlashForCausalLM reads of ``self_attn``: fused ``qkv_proj``, ``o_proj``, per-head
    ``q_norm``/``k_norm``, sizes and ``rotary_emb`` (NeoX over the first ``rotary_dim``)."""

    def __init__(self, r, max_positions):
        super().__init__()
        d = r.dims
        self.head_dim, self.num_heads, self.num_key_value_heads = d.head_dim, d.heads, d.kv_heads
        self.q_size, self.kv_size = d.heads * d.head_dim, d.kv_heads * d.head_dim
        self.qkv_proj = Linear(d.hidden, self.q_size + 2 * self.kv_size, bias=False)
        self.o_proj = Linear(self.q_size, d.hidden, bias=False)
        self.q_norm = _norm(r, "q_norm", d.head_dim)
        self.k_norm = _norm(r, "k_norm", d.head_dim)
        rope = RopeParams(dim=d.rotary_dim, theta=r.rope.theta, max_positions=max_positions)
        self.rotary_emb = RotaryEmbedding(rope, head_dim=d.head_dim, is_neox=True)


class DraftsmithDecoderLayer(nn.Module):
    def __init__(self, r, max_positions):
        super().__init__()
        d, m = r.dims, r.mlp
        self.input_layernorm = _norm(r, "input_layernorm", d.hidden)
        self.self_attn = DraftsmithAttention(r, max_positions)
        self.post_attention_layernorm = _norm(r, "post_attention_layernorm", d.hidden)
        oai = dict(swiglu_alpha=m.alpha, swiglu_beta=1.0, swiglu_limit=m.limit) if m.kind == "swiglu_oai" else {}
        self.mlp = GatedMLP(hidden_size=d.hidden, intermediate_size=d.intermediate, bias=False, **oai)


class DraftsmithModel(nn.Module):
    def __init__(self, r, max_positions):
        super().__init__()
        d = r.dims
        self.embed_tokens = Embedding(d.vocab, d.hidden)
        self.layers = nn.ModuleList([DraftsmithDecoderLayer(r, max_positions) for _ in range(d.num_layers)])
        self.norm = _norm(r, "norm", d.hidden)


@register_auto_model(ARCHITECTURE)
class DraftsmithBackbone(DecoderModelForCausalLM):
    """The drafter's layers, registered under its architecture (DFlashForCausalLM builds them)."""

    def __init__(self, model_config):
        config = model_config.pretrained_config
        r = DRAFTER.bind(config).resolved
        max_positions = getattr(config, "max_position_embeddings", None) or ROPE_TABLE_POSITIONS
        super().__init__(DraftsmithModel(r, max_positions), config=model_config,
                         hidden_size=r.dims.hidden, vocab_size=r.dims.vocab)
'''

NAMED_BACKBONE = '''

from tensorrt_llm._torch.models.modeling_utils import register_auto_model  # noqa: E402
from $module import $cls  # noqa: E402


@register_auto_model(ARCHITECTURE)
class DraftsmithBackbone($cls):
    """The backbone named at emission (``backbone=``), registered under the drafter architecture."""
'''

INIT_TEMPLATE = '''"""draftsmith adapter ``$adapter`` as a TensorRT-LLM custom model module.

Generated by ``draftsmith emit``. Importing this package checks the TensorRT-LLM version,
then registers the drafter (see ``drafter.py``).
"""

import tensorrt_llm as _trtllm

from draftsmith.framework.emit.binding import check_engine_version

check_engine_version(getattr(_trtllm, "__version__", "0"), "$minimum", "$package")

from .drafter import (  # noqa: E402
    ARCHITECTURE,
    DRAFTER,
    MAX_DRAFT_LEN,
    $drafter_class,
    build_draft_model,
)

__all__ = ["ARCHITECTURE", "DRAFTER", "MAX_DRAFT_LEN", "$drafter_class", "build_draft_model"]
'''

DRAFTER_TEMPLATE = '''"""TensorRT-LLM custom model module for the draftsmith adapter ``$adapter``.

Generated by ``draftsmith emit``; re-emit after changing the adapter. The compiled drafter
is data (``resolved.json`` beside this file); the installed draftsmith runs it.

- drafter architecture: $architecture
- decoding_type: $decoding_type; base class: $base_module.$base_class
- backbone class: $backbone_line
- max_draft_len: $max_draft_len ($mdl_reason)
- layers (mask -> lowering per device class):
$layer_lines

Importing it registers the backbone under the drafter architecture and a $decoding_type
draft-model builder that returns :class:`$drafter_class` for this architecture (other
drafters keep the builder registered before). A worker process that never imported it
builds TensorRT-LLM's own class, which reads the same masks from the converted config.
"""

from pathlib import Path

from draftsmith.framework.emit.binding import PackagedDrafter, device_class_of
from $base_module import $base_class
from $registry_module import get_registered_draft_model_builder, register_draft_model
from $spec_mode_module import SpeculativeDecodingMode

DRAFTER = PackagedDrafter.from_package(Path(__file__).resolve().parent)
ARCHITECTURE = DRAFTER.architecture
MAX_DRAFT_LEN = $max_draft_len
ROPE_TABLE_POSITIONS = 262144  # RoPE table rows when the config has no max_position_embeddings


def _compiled(drafter):
    """The checkpoint's compiled drafter (its config's draftsmith section), read once per instance."""
    bound = vars(drafter).get("_draftsmith_bound")
    if bound is None:
        bound = vars(drafter)["_draftsmith_bound"] = DRAFTER.bind(drafter.config)
    return bound


class $drafter_class($base_class):
    """``$base_class`` whose masks and block attention come from the compiled drafter."""

    def _get_attention_mask_args(self, layer_idx):
        """``(causal, (left, right))`` of layer ``layer_idx`` as trained."""
        return _compiled(self).mask_args(layer_idx)

    def _resolve_block_attention(self, layer_idx):
        """The trained mask, with no window substitution."""
        return _compiled(self).mask_args(layer_idx)

    def validate_block_attention_windows(self) -> None:
        """TensorRT-LLM's check (raises for non-causal windows under TRTLLM), then whether the
        spec's lowerings run on this device with this backend (one-line ValueError)."""
        super().validate_block_attention_windows()
        _compiled(self).check_combination(self.dflash_attention_backend, device_class_of(self))

    def dflash_forward(self, noise_embedding, query_positions, num_ctx_per_req, ctx_k_cache,
                       ctx_v_cache, ctx_cache_batch_idx, ctx_kv_cache=None, ctx_page_table=None):
        """The block decode with each layer's attention through its draftsmith lowering for
        the device class; TensorRT-LLM's own when the spec has no table for the device."""
        device = device_class_of(self)
        if _compiled(self).lowerings(device) is None:
            return super().dflash_forward(noise_embedding, query_positions, num_ctx_per_req,
                                          ctx_k_cache, ctx_v_cache, ctx_cache_batch_idx,
                                          ctx_kv_cache, ctx_page_table)
        return _compiled(self).dflash_forward(self, device, noise_embedding, query_positions,
                                              num_ctx_per_req, ctx_k_cache, ctx_v_cache,
                                              ctx_cache_batch_idx, ctx_kv_cache, ctx_page_table)
$backbone_block

PREVIOUS_BUILDER = get_registered_draft_model_builder(SpeculativeDecodingMode.$mode)


@register_draft_model(SpeculativeDecodingMode.$mode)
def build_draft_model(model_config, draft_config, lm_head, model):
    """The $decoding_type builder: this drafter for its architecture, else the previous one."""
    architectures = getattr(draft_config.pretrained_config, "architectures", None) or []
    if ARCHITECTURE not in architectures and PREVIOUS_BUILDER is not None:
        return PREVIOUS_BUILDER(model_config, draft_config, lm_head, model)
    DRAFTER.bind(draft_config.pretrained_config)  # refuses an unconverted checkpoint in one line
    backend = model_config.spec_config.attention_backend
    return $drafter_class(draft_config, dflash_attention_backend=backend)
'''

