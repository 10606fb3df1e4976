"""Loading specs: find adapter files, read them safely, apply overrides, validate.

The library flow (:func:`load_spec`, no Hydra)::

    adapter YAML (safe loader, no code) --extends--> data --pydantic--> defaults filled in
    --dotted overrides--> (no ``${`` anywhere) --> AdapterSpec

The command line composes the same files with Hydra instead (``cli/compose.py``).

A spec is data: YAML is read with the safe loader, ``_target_`` keys and every ``${``
(interpolation of any kind: references, resolvers, nested tricks) are refused, in keys and
values, in the file and again on the final tree after command-line overrides, ``extends:`` names a sibling adapter by name only
(it cannot leave the adapter directories), and every problem becomes a one-line
:class:`UserError` naming the file, key path and line.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ValidationError

from ...adapters import ADAPTER_DIR
from ..errors import UserError
from .schema import AdapterSpec
from .override_args import check_composed, data_problems, key_path, split_argument
from .overrides import _steps, apply_overrides, resolve_steps
from .yaml_lines import line_of, load_yaml

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def builtin_adapter_dir() -> Path:
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


def _where(file: Path, lines: dict, path: tuple) -> str:
    line = line_of(lines, path)
    return f"{file}:{line}" if line else str(file)


def check_data_only(data: Any, file: Path, lines: dict) -> None:
    """Refuse, one line each naming file, line and key, anything in a spec file that a spec cannot
    hold or that could make a loader run code (:func:`.override_args.data_problems`)."""
    problems = [f"{_where(file, lines, path)}: {key_path(path)}: {msg}" for path, msg in data_problems(data)]
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
    check_file_name(data, path, lines)
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


def check_file_name(data: dict, path: Path, lines: dict) -> None:
    """An adapter is named by its file: ``name:`` must equal the file's stem (``x.yaml`` holds
    ``name: x``), so ``adapter=x``, ``adapter=dir/x.yaml`` and ``extends: x`` all mean one spec.
    A file that ``extends:`` another states its own name (it would otherwise inherit the base's);
    a missing ``name:`` without ``extends:`` is left to the schema (required key)."""
    own = data.get("name")
    if own is None and "extends" in data:
        raise UserError(f"{path}: name: required in a file that uses extends: (write `name: {path.stem}`, "
                        "an adapter is named by its file)")
    if isinstance(own, str) and own != path.stem:
        raise UserError(f"{_where(path, lines, ('name',))}: name: {own!r} differs from the file name "
                        f"{path.name!r} (an adapter is named by its file: rename the file to {own}.yaml "
                        f"or write `name: {path.stem}`)")


def check_name_kept(spec: AdapterSpec, path: Path) -> None:
    """After command-line overrides: ``adapter.name=`` cannot rename an adapter away from its file."""
    if spec.name != path.stem:
        raise UserError(f"command line: adapter.name={spec.name}: an adapter is named by its file "
                        f"({path.name}); its name cannot be overridden")


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _known_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names (and aliases) of the model reached by ``loc`` (for did-you-mean).

    ``loc`` steps through fields, list indexes and dict keys (``attention.lowering.windowed``).
    """
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


def find_adapter(adapter: str, adapter_dir: str | Path | None = None) -> tuple[str, dict[str, Path]]:
    """(adapter name, name -> YAML path of every adapter it may extend) for ``adapter=``: a name,
    or a path ending in ``.yaml``; an unknown name is one line with a did-you-mean."""
    files = adapter_files(adapter_dir)
    name = adapter
    if adapter.endswith(".yaml"):  # adapter=path/to/file.yaml
        p = Path(adapter)
        if not p.is_file():
            raise UserError(f"adapter={adapter}: no such file")
        files[p.stem] = p.resolve()
        name = p.stem
    if name not in files:
        close = difflib.get_close_matches(name, list(files), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"adapter={name}: unknown adapter{hint}; known: {', '.join(sorted(files))} "
                        "(`draftsmith adapters` lists them)")
    return name, files


def load_spec(adapter: str, overrides: Iterable[str] = (), adapter_dir: str | Path | None = None) -> tuple[AdapterSpec, Path]:
    """Load adapter ``adapter`` (name or YAML path) with dotted overrides: the library entry
    point (no Hydra). ``overrides``: ``key=value``, ``+key=value`` (a new key), ``~key``
    (remove), keys optionally prefixed ``adapter.``; values are YAML scalars or lists."""
    name, files = find_adapter(adapter, adapter_dir)
    data, lines, path = read_spec_data(name, files)
    # the file alone first (errors carry its line numbers), then every default filled in so
    # that overrides can reach any field of the schema
    full = validate_spec(data, path, lines).model_dump(mode="json", by_alias=True)
    overrides = list(overrides)
    full = apply_overrides(full, overrides, path)
    check_composed(full, overrides, lambda o: tuple(resolve_steps(full, _steps(split_argument(o)[1]), str(path))),
                   f"{path}: override")
    spec = validate_spec(full, path, lines)
    check_name_kept(spec, path)
    return spec, path
