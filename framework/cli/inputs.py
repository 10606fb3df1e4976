"""What a command works on, from its options: the adapter (named, or routed by a checkpoint's
``architectures``), the drafter folder ``source=`` names, and where drafters sit under a model
root."""

from __future__ import annotations

import sys
from pathlib import Path

from ..compile.adapter import compile_spec, route
from ..convert.checkpoint import drafter_subfolder_hint, read_config
from ..convert.locate import locate, no_subfolder_hint
from ..errors import UserError
from ..spec.loading import adapter_files, load_spec


def need(opts: dict, key: str, command: str) -> str:
    """``opts[key]`` as text; a one-line UserError when it is missing or empty."""
    if opts.get(key) in (None, ""):
        raise UserError(f"draftsmith {command}: missing {key}=... (see `draftsmith help {command}`)")
    return str(opts[key])


def adapter(spec, path, opts, source: Path | None = None):
    """The compiled adapter: ``spec`` with the command line's ``adapter.*`` overrides, else the
    one that ``source``'s ``config.json`` routes to; a one-line UserError with neither."""
    if spec is not None:
        return compile_spec(spec, path, opts.get("adapter_overrides", ()))
    if source is None:
        raise UserError("missing adapter=NAME (`draftsmith adapters` lists them)")
    raw = read_config(source)
    hint = drafter_subfolder_hint(source) or no_subfolder_hint(source, subfolders(None, opts))
    return route(raw, opts.get("adapter_dir"), where=f"{source / 'config.json'}{hint}")


def subfolders(spec, opts) -> list[str]:
    """Where drafters may sit under a model root: the chosen adapter's ``match.subfolders``,
    else every known adapter's."""
    if spec is not None:
        return list(spec.match.subfolders)
    out: list[str] = []
    for name in adapter_files(opts.get("adapter_dir")):
        try:
            out += load_spec(name, adapter_dir=opts.get("adapter_dir"))[0].match.subfolders
        except UserError:
            continue  # a broken adapter file is reported when it is chosen, not here
    return out


def source(opts, spec, key: str = "source") -> Path:
    """``source=`` resolved (folder, model root's drafter subfolder, or a Hugging Face cache
    snapshot); a note on stderr says where it went."""
    found = locate(opts[key], subfolders(spec, opts), key=key)
    if found.how:
        print(f"{key}={opts[key]}: using {found.path} ({found.how})", file=sys.stderr)
    return found.path
