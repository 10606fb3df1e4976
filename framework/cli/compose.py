"""The command line's composer: ``key=value`` arguments -> (CLI options, AdapterSpec) with Hydra.

The flow for ``draftsmith <command> key=value ...``::

    adapter YAML file --(safe YAML, no code: spec/loading.py)--> {"adapter": spec, defaults filled}
    --(Hydra's overrides from the command line: apply_hydra_overrides)--> OmegaConf.to_container(resolve=False)
    --(no ``${`` anywhere in the composed tree)--> (pydantic) --> AdapterSpec

Nothing is interpolated: a ``${`` in a spec file or a command-line value (however nested or
quoted) is refused in one line, so output never depends on the environment.

Hydra and OmegaConf are used here only; the library loads specs with ``spec.loading.load_spec``.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf
from pydantic import ValidationError

from ..errors import UserError
from ..spec.loading import (_known_keys, _where, check_name_kept, find_adapter, key_path, read_spec_data,
                            validate_spec, validation_problems)
from ..spec.override_args import check_composed, is_index, short, split_argument
from ..spec.overrides import _steps, addresses_dotted_key, apply_overrides, check_argument, reach, resolve_steps
from ..spec.schema import AdapterSpec
from .keys import ALL_KEYS, COMMANDS, parse_args

#: Every key any command reads (the per-command table is :data:`.keys.COMMANDS`).
CLI_KEYS: dict[str, Any] = {n: None for n in ALL_KEYS}

#: Characters Hydra's override lexer cannot take in an unquoted value.
_UNLEXABLE = re.compile(r"[~(),'\"\\\s=:]|^[\[{]|[\]}]$")


def compose(command: str, args: list[str]) -> tuple[dict, AdapterSpec | None, Path | None]:
    """Compose ``draftsmith <command> key=value ...``.

    The command's own keys are parsed by the table (:func:`.keys.parse_args`); the
    ``adapter.*`` overrides are composed over the chosen adapter with Hydra. Returns (typed
    options, validated spec or None when no ``adapter=`` was given, spec path).
    """
    cmd = COMMANDS[command]
    opts, overrides = parse_args(cmd, args)
    adapter_dir = opts.get("adapter_dir")
    chosen = opts.get("adapter")
    if chosen is None:
        if overrides:
            raise UserError(f"{overrides[0].split('=', 1)[0]}: an adapter override needs adapter=NAME")
        return opts, None, None
    chosen, files = find_adapter(chosen, adapter_dir)

    data, lines, path = read_spec_data(chosen, files)
    # validate the file alone first (errors carry its line numbers), then fill in every
    # default, so that overrides can reach any field of the schema
    full = validate_spec(data, path, lines).model_dump(mode="json", by_alias=True)
    # every argument checked as data first (bounded, linear, lists addressed by plain indices);
    # Hydra's keys cannot hold a dot: overrides that name a dotted key (``config.fields`` and
    # ``synth.tiny`` are keyed by dotted config keys) or step into a list are applied by the
    # library, first (Hydra's list merging has no one-line errors and no append)
    crosses = {o: check_argument(o, full) for o in overrides}
    library = [o for o in overrides if crosses[o] or
               addresses_dotted_key(full, split_argument(o)[1], f"command line: {short(o)}")]
    if library:
        full = apply_overrides(full, library, origin="command line")
        check_composed(full, library, lambda o: _override_path(o, full))  # before OmegaConf parses any `${`
    quoted = [quote_override(o) for o in overrides if o not in library]
    try:
        container = apply_hydra_overrides({"adapter": full}, quoted)
    except Exception as e:  # Hydra/OmegaConf errors: make them one line
        raise UserError(_hydra_message(e, overrides, data, path, lines, full)) from None
    check_composed(container.get("adapter"), overrides, lambda o: _override_path(o, full))
    spec = _validate_overridden(container.pop("adapter", None), path, lines, overrides, full)
    check_name_kept(spec, path)
    opts["adapter"] = chosen
    opts["adapter_overrides"] = list(overrides)  # for the compile step's blame (Adapter.blame)
    return opts, spec, path


def apply_hydra_overrides(tree: dict, overrides: list[str]) -> dict:
    """``tree`` with Hydra's overrides applied as ``hydra.compose`` applies them once it has
    composed its defaults list: Hydra's grammar (``OverridesParser``), its refusal of sweeps in a
    single run, the root in struct mode (a new key needs ``+``), then Hydra's own
    ``ConfigLoaderImpl._apply_overrides_to_config`` (``=``, ``+``, ``++``, ``~``). The tree is
    the whole composed config (``{"adapter": spec}``): there is no config search path, defaults
    list or ``hydra`` node to compose, so none is (composing them cost about 0.2 s a command).
    Returns a plain container, nothing resolved."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    ConfigLoaderImpl.validate_sweep_overrides_legal(parsed, run_mode=RunMode.RUN, from_shell=False)
    cfg = OmegaConf.create(tree)
    OmegaConf.set_struct(cfg, True)
    ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
    return OmegaConf.to_container(cfg, resolve=False)


def quote_override(arg: str) -> str:
    """``adapter.KEY=VALUE`` with VALUE quoted for Hydra when its lexer could not take it
    (``~``, ``(``, ``,``, spaces, ...); lists/dicts (``[..]``, ``{..}``) and quoted values pass."""
    if "=" not in arg or arg.startswith("~"):
        return arg
    key, value = arg.split("=", 1)
    if not value or value[0] in "'\"" or (value[0] in "[{" and value[-1] in "]}"):
        return arg
    if not _UNLEXABLE.search(value):
        return arg
    return key + "=" + "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _override_path(arg: str, full: dict) -> tuple:
    key = split_argument(arg)[1]
    return tuple(resolve_steps(full, _steps(key), f"command line: {short(arg)}"))


def _validate_overridden(spec_data, path, lines, overrides: list[str], full: dict) -> AdapterSpec:
    """Validate the composed spec; an error at (or under) an overridden key names the
    command-line argument, not a line of the YAML file."""
    try:
        return AdapterSpec.model_validate(spec_data)
    except ValidationError as e:
        problems = validation_problems(e, path, lines or {})
        out = []
        for err, text in zip(e.errors(), problems):
            loc = tuple(err["loc"])
            hit = next((o for o in overrides if o[:1] != "~" and
                        (loc[:len(_override_path(o, full))] == _override_path(o, full)
                         or _override_path(o, full)[:len(loc)] == loc)), None)
            if hit is not None:
                text = f"command line: {hit}: {key_path(loc)}: " + text.split(f": {key_path(loc)}: ", 1)[-1]
            out.append(text)
        raise UserError(*out) from None


def _hydra_message(e: Exception, args: list[str], data: dict, path: Path | None, lines: dict | None,
                   full: dict) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    full_key = str(getattr(e, "full_key", None) or "")
    if full_key.startswith("adapter.") and path is not None:
        # an interpolation that failed to resolve: in the spec file, or from the command line
        parts = tuple(int(p) if is_index(p) else p for p in re.split(r"[.\[\]]+", full_key[8:]) if p)
        value, found = reach(data, parts)
        if found == len(parts) and isinstance(value, str) and "${" in value:
            return f"{_where(path, lines or {}, parts)}: {key_path(parts)}: {text}"
        return f"command line: {full_key}: {text}"
    m = re.match(r"Could not (?:override|append to config|delete from config)[^']*'([^']+)'", text) or \
        re.match(r"Key '([^']+)' is not in struct", text)
    if m:
        key = m.group(1).lstrip("+~")
        arg = next((a for a in args if a.lstrip("+~").split("=", 1)[0] == key), key)
        parts = tuple(int(p) if is_index(p) else p for p in key.split(".")[1:])
        parent, found = reach(full, parts)  # the mapping or list where the key's path leaves what exists
        if isinstance(parent, list) and found < len(parts):
            return (f"command line: {arg}: {key_path(parts[:found]) or 'adapter'} has {len(parent)} item(s), no item "
                    f"{parts[found]}; to add one, prefix the override with + ('+{arg.lstrip('+')}')")
        known = _known_keys(AdapterSpec, parts[:-1])
        if parts[-1] in known or isinstance(parent, dict) and found == len(parts) - 1 and not known:
            return (f"command line: {arg}: {key_path(parts[:-1])} has no key {parts[-1]!r} yet; to add a key the "
                    f"spec does not have, prefix the override with + ('+{arg.lstrip('+')}')")
        close = difflib.get_close_matches(str(parts[-1]), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else (f"; known: {', '.join(known)}" if known else "")
        return f"command line: {arg}: {key_path(parts)}: unknown key{hint}"
    if "mismatched input" in text or "no viable alternative" in text or "token recognition" in text:
        return (f"command line: cannot parse {' '.join(args)!r} as Hydra overrides ({text}); quote the value "
                f"inside the argument, e.g. 'adapter.KEY=\"a value\"'")
    merging = re.match(r"Error merging override (.+)$", text)
    if merging:  # Hydra's wrapper: say which argument and what was wrong with it (the cause)
        arg = next((a for a in args if quote_override(a) == merging.group(1) or a == merging.group(1)),
                   merging.group(1))
        cause = e.__cause__ if e.__cause__ is not None else e.__context__
        why = str(cause).strip().splitlines()[0] if cause is not None and str(cause).strip() else "cannot be applied"
        return f"command line: {short(arg)}: {why}"
    arg = next((a for a in args if a in text or split_argument(a)[1] in text), None)
    return f"command line: {short(arg) + ': ' if arg else ''}{text}"
