"""The command line's composer: ``key=value`` arguments -> (CLI options, AdapterSpec) with Hydra.

The flow for ``draftsmith <command> key=value ...``::

    adapter YAML files --(safe YAML, no code: spec/loading.py)--> ConfigStore group ``adapter``
    --(Hydra compose with the command line)--> OmegaConf.to_container(resolve=True)
    --(pydantic)--> AdapterSpec

Hydra and OmegaConf are used here only; the library loads specs with ``spec.loading.load_spec``.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from ..errors import UserError
from ..spec.loading import _known_keys, _where, adapter_files, key_path, read_spec_data, validate_spec
from ..spec.schema import AdapterSpec

#: Keys the command line may set besides ``adapter.*`` (each command reads its own).
CLI_KEYS: dict[str, Any] = {
    "adapter_dir": None, "source": None, "out": None, "seed": 0, "scale": "tiny",
    "checkpoint": None, "target": None, "device": "cpu", "context": 64, "batch": 1,
    "format": "table", "dump": None, "check": False, "overwrite": False, "to": "dflash",
    "lowering": None, "page_size": 16, "threads": None, "verbose": False,
    "verifier": None, "dtype": None, "layout": None,
}


def compose(args: list[str]) -> tuple[dict, AdapterSpec | None, Path | None]:
    """Compose ``key=value`` command-line arguments with Hydra.

    Returns (cli options, validated spec or None when no ``adapter=`` was given, spec path).
    """
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
