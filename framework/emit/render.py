"""``draftsmith emit``: write a Python package TensorRT-LLM loads as a custom model module.

``emit(adapter, target="trtllm", out=DIR)`` writes ``DIR/<package>/``:

- ``__init__.py``, ``drafter.py``: constant text, the same for every adapter
  (:mod:`.fixed`); importing them hands the folder to the installed draftsmith
  (:func:`.runtime.install`), which reads and validates the data below;
- ``resolved.json``: the compiled drafter (:class:`ResolvedDrafter` dump) and the emission's
  facts (adapter, architecture, decoding type, backbone, package), validated here and again at
  import (:mod:`.names`);
- ``speculative_config.yaml``: the ``speculative_config`` snippet, written by ``yaml.safe_dump``
  with only fields TensorRT-LLM's decoding config defines (:data:`DECODING_CONFIG_FIELDS`);
- ``PASTE.md``: the architecture-index row and telemetry-allowlist entry, strings quoted with
  ``repr`` after validation.

``max_draft_len`` is derived (block size ``B``: ``B`` if ``sample_from_anchor`` else ``B - 1``)
and an explicit value that contradicts it is refused. Every refusal is a one-line
:class:`UserError` (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import py_compile
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from ..compile.adapter import Adapter, compile_spec
from ..compile.converted_config import compile_config
from ..compile.decoding import decoding_type
from ..compile.read_back import read_converted
from ..compile.resolved import ResolvedDrafter
from ..errors import UserError
from ..io.publish import atomic_dir, publish, remove_temp
from ..io.safe_read import MAX_CONFIG_BYTES, load_json
from ..spec.loading import load_spec
from ..compile.trtllm_limits import (builtin_math_differences, norm_problem, trtllm_notes, trtllm_problems,
                                     worker_mask_problems)
from .binding import PACKAGE_DATA, PackagedDrafter
from .fixed import PYTHON_FILES
from . import names
from .names import GENERATED, check_backbone, check_identifier, check_package_data
from .snippet import (DECODING_CONFIG_FIELDS, DERIVED_KEYS, SNIPPET_ATTENTION_BACKEND,  # noqa: F401 (re-exported)
                      SPECULATIVE_MODEL_PLACEHOLDER, serving_keys, speculative_config)

DEFAULT = "default"  # sentinel: the spec's engine.trtllm_backbone, else the generated backbone
SNIPPET_HEADER = ("# speculative_config for trtllm-serve / the LLM API, written by draftsmith emit:\n"
                  "#   trtllm-serve <target> --custom_module_dirs <this package's folder> --config <this file>\n")


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
    #: the values the snippet took from the adapter's example config (no ``config=``), else None
    example_values: Optional[str] = None
    #: the target model as ``trtllm-serve`` takes it (a folder or a repo id; ``emit model=``), else None
    model: Optional[str] = None

    def serve_command(self) -> str:
        return _serve_command(self.package_dir, self.model)

    def summary(self) -> str:
        """The text ``draftsmith emit`` prints (every spec-derived string quoted with repr)."""
        return "\n".join(
            [
                f"wrote {self.package_dir} ({', '.join(p.name for p in self.files)})",
                f"adapter {self.adapter!r}, decoding_type {self.decoding_type!r}",
                f"max_draft_len = {self.max_draft_len}",
                *([] if self.example_values is None else [
                    f"no config= given: {self.example_values} come from the adapter's example config "
                    f"(synth.config in {self.adapter_file}), not from a checkpoint; "
                    "pass config=<drafter config.json> for yours"]),
                "",
                self.speculative_config.rstrip(),
                "",
                ("serve with:" if self.model is not None else
                 "serve with (the target model is the one path emit was not told: pass model=<its folder or repo id>):"),
                f"    {self.serve_command()}",
                "",
                "optional, only for a TensorRT-LLM checkout (PASTE.md): architecture index row "
                "(tensorrt_llm/_torch/models/_arch_index.py, MODEL_ARCH_TO_MODULE):",
                f"    {self.arch_index_row}",
                "telemetry allowlist entry (tensorrt_llm/usage/architecture_allowlist.py, PUBLIC_HF_ARCHITECTURES):",
                f"    {self.telemetry_entry}",
                *self.notes,
            ]
        )


def _serve_command(package_dir: Path, model: Optional[str] = None) -> str:
    """The ``trtllm-serve`` line for the package at ``package_dir`` and the target ``model`` (a
    placeholder when None; paths shell-quoted)."""
    pkg = Path(package_dir).resolve()
    target = "<target model>" if model is None else shlex.quote(model)
    return (f"trtllm-serve {target} --custom_module_dirs {shlex.quote(str(pkg))} "
            f"--config {shlex.quote(str(pkg / 'speculative_config.yaml'))}")


def max_draft_len_of(r: ResolvedDrafter, explicit: Optional[int] = None) -> tuple[int, str]:
    """``(max_draft_len, reason)`` of drafter ``r``; refuses an ``explicit`` value that
    contradicts it."""
    reason = f"block_size {r.block_size}, sample_from_anchor {str(r.sample_from_anchor).lower()}"
    if explicit is not None and explicit != r.max_draft_len:
        raise UserError(f"adapter spec max_draft_len = {explicit} contradicts the derived max_draft_len "
                        f"{r.max_draft_len} ({reason})")
    return r.max_draft_len, reason


def speculative_config_yaml(cfg: dict, example_values: Optional[str] = None) -> str:
    """``speculative_config.yaml``: a constant comment, one more comment line when the values
    come from the adapter's example config (``example_values``: :func:`example_values`, ints
    only), then ``yaml.safe_dump``."""
    example = "" if example_values is None else (
        f"# no config= given: {example_values} come from the adapter's example config (its synth.config), "
        "not from a checkpoint; pass config=<drafter config.json> for yours\n")
    return SNIPPET_HEADER + example + yaml.safe_dump({"speculative_config": cfg}, sort_keys=False, allow_unicode=False)


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an int, got {type(value).__name__}")
    return value


def example_values(resolved: ResolvedDrafter) -> str:
    """The snippet's checkpoint-specific values, as text built from ints only (no string of the
    spec or config reaches it): ``block_size B, mask_token_id M, target_layer_ids [..] and max_draft_len``."""
    layers = ", ".join(str(_int(i)) for i in resolved.target_layer_ids)
    return (f"block_size {_int(resolved.block_size)}, mask_token_id {_int(resolved.mask_token_id)}, "
            f"target_layer_ids [{layers}] and max_draft_len")


def load_drafter_config(path: Optional[Path]) -> Optional[dict]:
    """The drafter's ``config.json`` at ``path`` (the file, or a folder holding it; bounded); None
    for no path."""
    if path is None:
        return None
    path = Path(path)
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        raise UserError(f"{path}: drafter config.json not found")
    return load_json(path, MAX_CONFIG_BYTES, "drafter config.json")


def _emission_config(adapter: Adapter, config: Optional[Path]) -> tuple[dict, ResolvedDrafter]:
    """The flattened config emission derives ``max_draft_len`` from: ``config`` if given,
    else the adapter's ``synth.config`` (the full-size source config it describes)."""
    raw = load_drafter_config(config)
    if raw is not None:  # config= read from disk: a `draftsmith convert` output, its record as written
        if "draftsmith" not in raw:
            raise UserError(f"config={config}: not a `draftsmith convert` output (its config.json has no draftsmith "
                            f"section); run `draftsmith convert adapter={adapter.name} source=<that checkpoint> "
                            "out=<dir>` and pass config=<dir>")
        refuse_record_overrides(adapter, config)
        record = read_converted(raw, where=f"config={config}")
        if record.adapter != adapter.name:
            raise UserError(f"config={config} was converted with adapter={record.adapter}, not adapter={adapter.name}; "
                            f"emit adapter={record.adapter} (or leave adapter= out: emit reads it from the config)")
        return raw, record
    raw = getattr(getattr(getattr(adapter, "spec", None), "synth", None), "config", None)
    if raw is None:
        raise UserError(f"adapter {adapter.name}: no synth.config; pass config=<converted folder>")
    if "draftsmith" in raw:  # an example config that is already a converted one
        return raw, ResolvedDrafter.from_config(raw, where=f"adapter {adapter.name} synth.config")
    return compile_config(adapter, dict(raw))


#: override prefixes ``emit`` applies itself on a converted ``config=`` (the snippet's ``docs.serving``)
EMIT_TIME_OVERRIDES = ("docs.",)


def refuse_record_overrides(adapter: Adapter, config: Path) -> None:
    """One-line UserError for an ``adapter.*`` override that would change the compiled record when
    ``config=`` is a converted config: the package carries that config's record, and TensorRT-LLM's
    drafter binds the converted checkpoint's record at run time, so the override belongs to
    ``draftsmith convert``."""
    for arg in getattr(adapter, "overrides", ()) or ():
        key = arg.lstrip("+~").split("=", 1)[0]
        key = key[len("adapter."):] if key.startswith("adapter.") else key
        if not key.startswith(EMIT_TIME_OVERRIDES):
            raise UserError(f"{arg}: config={config} is a `draftsmith convert` output whose record (masks, lowerings, "
                            "norms) the package and TensorRT-LLM's drafter read as written; pass this override to "
                            f"`draftsmith convert adapter={adapter.name} ...` and emit from its output")


@dataclass(frozen=True)
class EngineNames:
    """The backbone the package registers: :data:`GENERATED`, a TensorRT-LLM
    ``"package.module:ClassName"``, or None for none (checked by :func:`~.names.check_backbone`)."""

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
    overwrite: bool = False,
    target_architecture: Optional[str] = None,
) -> EmitResult:
    """Write the custom-model package for ``adapter`` into ``out`` and return what was written.

    ``backbone``: :data:`DEFAULT` (the spec's ``engine.trtllm_backbone``, else generated),
    :data:`GENERATED`, a TensorRT-LLM ``"module:Class"``, or ``None`` to register none.
    ``config``: a converted ``config.json`` (or its folder) the snippet describes (its folder
    becomes ``speculative_model``); default the adapter's ``synth.config``.
    ``target_architecture``: the target's ``architectures[0]``; the package then re-registers
    TensorRT-LLM's own class for it, which carries the package into TensorRT-LLM's worker processes
    (:func:`~.runtime.register_target`; without it a worker builds TensorRT-LLM's own drafter class).
    """
    if target != "trtllm":
        raise UserError(f"target={target!r}: unknown; known: trtllm")
    spec, yaml_path = load_spec(adapter, list(overrides), adapter_dir=adapter_dir)
    compiled = compile_spec(spec, yaml_path, tuple(overrides))
    return write_package(
        compiled, Path(yaml_path), Path(out), default_engine(compiled, backbone), config=config,
        package=package, explicit_max_draft_len=getattr(spec, "max_draft_len", None),
        overwrite=overwrite, target_architecture=target_architecture,
    )


def default_engine(adapter: Adapter, backbone: Optional[str] = DEFAULT) -> EngineNames:
    """The backbone resolved (:data:`DEFAULT`: the compiled ``adapter``'s
    ``engine.trtllm_backbone``, else :data:`GENERATED`) and checked."""
    if backbone == DEFAULT:
        backbone = getattr(getattr(adapter.spec, "engine", None), "trtllm_backbone", None) or GENERATED
    try:
        return EngineNames(backbone=check_backbone(backbone, "backbone"))
    except ValueError as e:
        raise UserError(f"adapter {adapter.name}: {e}") from None


def write_package(
    adapter: Adapter,
    yaml_path: Path,
    out: Path,
    engine: EngineNames = EngineNames(),
    *,
    config: Optional[Path] = None,
    package: Optional[str] = None,
    explicit_max_draft_len: Optional[int] = None,
    overwrite: bool = False,
    target_architecture: Optional[str] = None,
) -> EmitResult:
    """Validate and write the package for a compiled ``adapter`` (read: ``name``,
    ``architectures``, ``spec``) whose spec file is ``yaml_path``. Every value it
    writes is checked first (:mod:`.names`); a refusal is one :class:`UserError` line and
    leaves nothing written. ``overwrite`` is passed to :func:`atomic_dir` / :func:`publish`."""
    where = f"adapter {adapter.name}"
    flat, resolved = _emission_config(adapter, config)
    max_draft_len, reason = max_draft_len_of(resolved, explicit_max_draft_len)
    norms = norm_problem(resolved)
    if norms:
        raise UserError(f"{where}: {norms}")
    problems = trtllm_problems(resolved)  # RoPE scaling, a value scale: the one list of them
    if problems:
        raise UserError(f"{where}: TensorRT-LLM cannot express this drafter: {'; '.join(problems)}")
    try:
        backbone = check_backbone(engine.backbone, "backbone")
        architecture = check_identifier((list(adapter.architectures) or [None])[0], "match.architectures[0]")
        package = check_identifier(package or f"draftsmith_{adapter.name}", "package")
        dtype = decoding_type(resolved)
        data = {"adapter": adapter.name, "architecture": architecture, "decoding_type": dtype,
                "backbone": backbone, "package": package, "resolved": resolved.section()}
        if target_architecture is not None:
            data["target_architecture"] = check_identifier(target_architecture, "target_architecture")
        check_package_data(data)
        package_data = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=True) + "\n"
        if len(package_data) > names.MAX_PACKAGE_DATA_BYTES:  # ASCII: characters are bytes
            raise ValueError(f"{PACKAGE_DATA} would hold {len(package_data)} bytes, more than the "
                             f"{names.MAX_PACKAGE_DATA_BYTES} the package's import reads")
        PackagedDrafter(json.loads(package_data))  # exactly what the import will read
    except ValueError as e:
        raise UserError(f"{where}: {str(e).splitlines()[0]}") from None
    speculative_model = str(_config_folder(config)) if config is not None else None
    serving = getattr(getattr(getattr(adapter, "spec", None), "docs", None), "serving", None)
    example = example_values(resolved) if config is None else None
    snippet = speculative_config_yaml(speculative_config(resolved, speculative_model, serving, where), example)
    arch_row = f"{architecture!r}: {'modeling_' + package!r},"
    telemetry = f"{architecture!r},"
    files = {
        **PYTHON_FILES,
        PACKAGE_DATA: package_data,
        "speculative_config.yaml": snippet,
        "PASTE.md": _paste_text(arch_row, telemetry),
    }
    # Written and compiled in a temp dir beside the package, then renamed into place (a
    # re-emit replaces the package whole; a failure leaves the old one untouched).
    pkg_dir = Path(out) / package
    tmp = atomic_dir(pkg_dir, overwrite=overwrite, command="emit")
    try:
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
            if name.endswith(".py"):
                py_compile.compile(str(tmp / name), cfile=str(tmp / "__pycache__" / f"{name}c"), doraise=True)
        shutil.rmtree(tmp / "__pycache__", ignore_errors=True)
        publish(tmp, pkg_dir, overwrite=overwrite)
    except BaseException:
        remove_temp(tmp)
        raise
    return EmitResult(
        package_dir=pkg_dir, package=package, files=[pkg_dir / name for name in files], adapter=adapter.name,
        adapter_file=Path(yaml_path), sha256=file_sha256(yaml_path) if Path(yaml_path).is_file() else "",
        architecture=architecture, max_draft_len=max_draft_len, speculative_config=snippet,
        arch_index_row=arch_row, telemetry_entry=telemetry, decoding_type=dtype, example_values=example,
        notes=[worker_note(architecture, target_architecture, resolved),
               *(f"warning: {p} -- TensorRT-LLM worker processes (built-in classes) resolve these masks "
                 "wrongly; serve with one process or re-emit with target_architecture=" for p in
                 worker_mask_problems(resolved) if target_architecture is None),
               *(f"warning: {n}" for n in trtllm_notes(resolved)),
               f"max_draft_len: {reason}",
               "checked against TensorRT-LLM's own source excerpts and stand-ins (tests/upstream/trtllm); "
               "never run inside TensorRT-LLM itself (docs/serving-on-trtllm.md)"],
    )


def worker_note(architecture: str, target_architecture: Optional[str], r: ResolvedDrafter) -> str:
    """The one line ``emit`` prints on which drafter class TensorRT-LLM's worker processes build
    (docs/serving-on-trtllm.md, "What runs where")."""
    if target_architecture is not None:
        return (f"worker processes: the package re-registers TensorRT-LLM's own {target_architecture!r} class "
                "(unchanged), so a worker's first lookup imports it and builds this drafter class (every "
                "deployment whose target's architectures[0] is that name)")
    differs = builtin_math_differences(r)
    return (("warning" if differs else "note") + ": no target_architecture= given: TensorRT-LLM's worker "
            "processes (every deployment but TP 1 "
            "with TLLM_WORKER_USE_SINGLE_PROCESS=1) build TensorRT-LLM's own drafter class on "
            f"{architecture!r}'s backbone, not this package's"
            + (f", which drafts this drafter with different math ({'; '.join(differs)})" if differs else "")
            + ", with TensorRT-LLM's attention instead of the spec's lowerings; re-emit with "
            "target_architecture=<the target's config.json architectures[0]>")


def _config_folder(config: Path) -> Path:
    path = Path(config).resolve()
    return path if path.is_dir() else path.parent


def _paste_text(arch_row: str, telemetry: str) -> str:
    return (
        "# Rows for a TensorRT-LLM checkout (optional)\n\n"
        "Not needed when the package is imported from outside TensorRT-LLM (the usual way:\n"
        "`--custom_module_dirs`). Only for a checkout that lists the architecture in its static\n"
        "index; the strings below were validated as identifiers and are quoted with `repr`.\n\n"
        "`tensorrt_llm/_torch/models/_arch_index.py`, `MODEL_ARCH_TO_MODULE`:\n\n"
        f"    {arch_row}\n\n"
        "`tensorrt_llm/usage/architecture_allowlist.py`, `PUBLIC_HF_ARCHITECTURES`:\n\n"
        f"    {telemetry}\n"
    )
