"""Loading specs: find adapter files, read them safely, compose with Hydra, validate.

The flow for ``draftsmith <command> key=value ...``::

    adapter YAML files --(safe YAML, no code)--> ConfigStore group ``adapter``
    --(Hydra compose with the command line)--> OmegaConf.to_container(resolve=True)
    --(pydantic)--> AdapterSpec

A spec is data: YAML is read with the safe loader, ``_target_`` keys and interpolation
resolvers (``${name:...}``) are refused, ``extends:`` names a sibling adapter by name only
(it cannot leave the adapter directories), and every problem becomes a one-line
:class:`UserError` naming the file, key path and line.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ValidationError

from .errors import UserError
from .schema import AdapterSpec
from .yaml_lines import line_of, load_yaml

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_RESOLVER = re.compile(r"\$\{\s*[A-Za-z_][\w.]*\s*:")

#: Keys the command line may set besides ``adapter.*`` (each command reads its own).
CLI_KEYS: dict[str, Any] = {
    "adapter_dir": None, "source": None, "out": None, "seed": 0, "scale": "tiny",
    "checkpoint": None, "target": None, "device": "cpu", "context": 64, "batch": 1,
    "format": "table", "dump": None, "check": False, "overwrite": False, "to": "dflash",
    "lowering": None, "page_size": 16, "threads": None, "verbose": False,
    "prompts": None, "max_new_tokens": 64, "dtype": None, "plot": None,
}


def builtin_adapter_dir() -> Path:
    from draftsmith.adapters import ADAPTER_DIR

    return ADAPTER_DIR


def adapter_files(adapter_dir: str | Path | None = None) -> dict[str, Path]:
    """Adapter name -> YAML path: the shipped ones, then ``adapter_dir`` (which wins)."""
    dirs = [builtin_adapter_dir()]
    if adapter_dir is not None:
        d = Path(adapter_dir)
        if not d.is_dir():
            raise UserError(f"adapter_dir={adapter_dir}: not a directory")
        dirs.append(d)
    files: dict[str, Path] = {}
    for d in dirs:
        for p in sorted(d.glob("*.yaml")):
            files[p.stem] = p
    return files


def _walk(data: Any, path: tuple = ()):
    yield path, data
    if isinstance(data, dict):
        for k, v in data.items():
            yield path + (k,), k
            yield from _walk(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _walk(v, path + (i,))


def key_path(path: Iterable) -> str:
    """A spec key path as users write it: ``attention.layers[2].causal``."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top>"


def _where(file: Path, lines: dict, path: tuple) -> str:
    line = line_of(lines, path)
    return f"{file}:{line}" if line else str(file)


def check_data_only(data: Any, file: Path, lines: dict) -> None:
    """Refuse anything in a spec that could make a loader run code."""
    problems = []
    for path, value in _walk(data):
        if value == "_target_":
            problems.append(f"{_where(file, lines, path)}: {key_path(path)}: `_target_` is refused (a spec is data)")
        elif isinstance(value, str) and _RESOLVER.search(value):
            problems.append(
                f"{_where(file, lines, path)}: {key_path(path)}: interpolation resolvers (`${{name:...}}`) "
                "are refused; only plain `${a.b}` references are allowed"
            )
    if problems:
        raise UserError(*problems)


def read_spec_data(name: str, files: dict[str, Path], _seen: tuple = ()) -> tuple[dict, dict, Path]:
    """Safe-load adapter ``name`` and resolve ``extends:``; return (data, lines, path)."""
    path = files[name]
    try:
        data, lines = load_yaml(path)
    except ValueError as e:
        raise UserError(str(e)) from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: an adapter spec must be a mapping at the top level")
    check_data_only(data, path, lines)
    base = data.pop("extends", None)
    if base is None:
        return data, lines, path
    where = _where(path, lines, ("extends",))
    if not isinstance(base, str) or not NAME_RE.match(base):
        raise UserError(f"{where}: extends: must be an adapter name (letters, digits, _), not a path")
    if base in _seen + (name,):
        raise UserError(f"{where}: extends: cycle through {' -> '.join(_seen + (name, base))}")
    if base not in files:
        raise UserError(f"{where}: extends: unknown adapter {base!r}; known: {', '.join(sorted(files))}")
    base_data, _, _ = read_spec_data(base, files, _seen + (name,))
    return _deep_merge(base_data, data), lines, path


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _known_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names (and aliases) of the model reached by ``loc`` (for did-you-mean).

    ``loc`` steps through fields, list indexes and dict keys (``attention.lowering.windowed``).
    """
    import types
    import typing

    def unwrap(ann):  # Optional[X] / X | None -> X (the model or container member)
        while typing.get_origin(ann) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            pick = [a for a in args if (isinstance(a, type) and issubclass(a, BaseModel))
                    or typing.get_origin(a) in (list, dict)]
            ann = (pick or args or [None])[0]
        return ann

    ann: Any = model
    for part in loc:
        ann = unwrap(ann)
        if typing.get_origin(ann) in (list, dict):  # an index or key selects the member type
            ann = typing.get_args(ann)[-1]
            continue
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        field = ann.model_fields.get(part) or next(
            (f for f in ann.model_fields.values() if f.alias == part), None
        )
        if field is None:
            return []
        ann = field.annotation
    ann = unwrap(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [f.alias or n for n, f in ann.model_fields.items()]
    return []


def validation_problems(err: ValidationError, file: Path, lines: dict) -> list[str]:
    """One line per pydantic error: ``file:line: key.path: message (did you mean ...)``."""
    out = []
    for e in err.errors():
        loc = tuple(e["loc"])
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            known = _known_keys(AdapterSpec, loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            msg = "unknown key" + (f" (did you mean {close[0]!r}?)" if close else f"; known: {', '.join(known)}")
        elif e["type"] == "missing":
            msg = "required key is missing"
        out.append(f"{_where(file, lines, loc)}: {key_path(loc)}: {msg}")
    return out


def validate_spec(data: dict, file: Path, lines: dict | None = None) -> AdapterSpec:
    """``AdapterSpec.model_validate`` with one-line, file-and-key errors."""
    try:
        return AdapterSpec.model_validate(data)
    except ValidationError as e:
        raise UserError(*validation_problems(e, file, lines or {})) from None


def compose(args: list[str]) -> tuple[dict, AdapterSpec | None, Path | None]:
    """Compose ``key=value`` command-line arguments with Hydra.

    Returns (cli options, validated spec or None when no ``adapter=`` was given, spec path).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    for a in args:
        if "=" not in a:
            raise UserError(f"argument {a!r}: expected key=value (e.g. adapter=minimax_dspark)")
    adapter_dir = next((a.split("=", 1)[1] for a in args if a.startswith("adapter_dir=")), None)
    files = adapter_files(adapter_dir)
    chosen = next((a.split("=", 1)[1] for a in args if a.startswith("adapter=")), None)
    if chosen is not None and chosen.endswith(".yaml"):  # adapter=path/to/file.yaml
        p = Path(chosen)
        if not p.is_file():
            raise UserError(f"adapter={chosen}: no such file")
        files[p.stem] = p.resolve()
        args = [f"adapter={p.stem}" if a == f"adapter={chosen}" else a for a in args]
        chosen = p.stem
    if chosen is not None and chosen not in files:
        raise UserError(f"adapter={chosen}: unknown adapter; known: {', '.join(sorted(files))}")

    cs = ConfigStore.instance()
    # hold only this call's adapter: Hydra deep-copies the whole store on every compose, so
    # specs left from earlier calls would make each compose slower in a long-lived process
    cs.repo.pop("adapter", None)
    data, lines, path = ({}, {}, None)
    if chosen is not None:
        data, lines, path = read_spec_data(chosen, files)
        # validate the file alone first (errors carry its line numbers), then store it with
        # every default filled in, so that overrides can reach any field of the schema
        full = validate_spec(data, path, lines).model_dump(mode="json", by_alias=True)
        cs.store(group="adapter", name=chosen, node=full)
    cs.store(name="draftsmith_cli", node={"defaults": [{"adapter": None}, "_self_"], **CLI_KEYS})
    GlobalHydra.instance().clear()
    try:
        with initialize(version_base=None, config_path=None):
            cfg = hydra_compose("draftsmith_cli", overrides=list(args))
            container = OmegaConf.to_container(cfg, resolve=True)
    except Exception as e:  # Hydra/OmegaConf errors: make them one line
        raise UserError(_hydra_message(e, args, data, path, lines)) from None
    finally:
        GlobalHydra.instance().clear()
    spec_data = container.pop("adapter", None)
    spec = validate_spec(spec_data, path, lines) if spec_data is not None else None
    for key, default in CLI_KEYS.items():
        if isinstance(default, bool):
            container[key] = strict_bool(key, container.get(key))
    return container, spec, path


def strict_bool(key: str, value: Any) -> bool:
    """A command-line boolean: ``true|false`` or ``1|0``; anything else is an error naming ``key``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise UserError(f"{key}={value}: expected true or false (or 1 / 0)")


def _hydra_message(e: Exception, args: list[str], data: dict, path: Path | None, lines: dict | None = None) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    full_key = str(getattr(e, "full_key", None) or "")
    if full_key.startswith("adapter.") and path is not None:
        # an interpolation that failed to resolve: in the spec file, or from the command line
        parts = tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", full_key[8:]) if p)
        value: Any = data
        for p in parts:
            value = value.get(p) if isinstance(value, dict) else (
                value[p] if isinstance(value, list) and isinstance(p, int) and p < len(value) else None)
        if isinstance(value, str) and "${" in value:
            return f"{_where(path, lines or {}, parts)}: {key_path(parts)}: {text}"
        return f"command line: {full_key}: {text}"
    m = re.match(r"Could not override '([^']+)'", text)
    if m:
        key = m.group(1)
        parts = key.split(".")
        if parts[0] == "adapter" and path is not None:
            known = _known_keys(AdapterSpec, tuple(parts[1:-1]))
            close = difflib.get_close_matches(parts[-1], known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return f"{path}: {'.'.join(parts[1:])}: unknown key in override {key}{hint}"
        close = difflib.get_close_matches(key, list(CLI_KEYS) + ["adapter"], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"command line: unknown key {key!r}{hint}; known: {', '.join(sorted(CLI_KEYS))}, adapter, adapter.*"
    return f"command line: {text}"


def load_spec(adapter: str, overrides: Iterable[str] = (), adapter_dir: str | Path | None = None) -> tuple[AdapterSpec, Path]:
    """Load adapter ``adapter`` (name or YAML path) with ``adapter.*`` overrides: the library entry point."""
    def scoped(o: str) -> str:
        sigil = o[: len(o) - len(o.lstrip("+~"))]
        key = o[len(sigil):]
        return o if key.startswith("adapter.") else f"{sigil}adapter.{key}"

    args = [f"adapter={adapter}"] + [scoped(o) for o in overrides]
    if adapter_dir is not None:
        args.append(f"adapter_dir={adapter_dir}")
    _, spec, path = compose(args)
    assert spec is not None and path is not None
    return spec, path
