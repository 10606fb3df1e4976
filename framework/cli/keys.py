"""The command line's one table: every command, its one-line summary and its keys (name,
type, default, one-line help).

Everything user-facing about the command line is generated from :data:`COMMANDS`: the
parsing of ``key=value`` (:func:`parse_value`), the refusal of keys a command does not read
(with a did-you-mean), ``draftsmith help [command]`` / ``--help`` and ``docs/cli.md``
(:func:`help_text`, :func:`cli_md`). Adding a key to a command is one row here.

Key types: ``str``, ``path`` (``~`` expanded), ``int`` (with a minimum), ``bool``
(``true|false|1|0`` only), ``enum`` (one of ``choices``), ``adapter`` (a name or a
``.yaml`` path). Every parsing error is one line naming the key and the value.
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import UserError


@dataclass(frozen=True)
class Key:
    """One ``key=value`` a command reads."""

    name: str
    type: str  # str | path | int | float | bool | enum | adapter
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: Optional[int] = None
    required: bool = False
    maximum: int = 2**31 - 1  # every int is bounded: a value past it is refused naming the key

    def type_text(self) -> str:
        if self.type == "enum":
            return "|".join(self.choices)
        if self.type == "float" and self.minimum is not None:
            return f"float >= {self.minimum}"
        if self.type == "int" and self.minimum is not None:
            return f"int >= {self.minimum}" if self.maximum == Key.maximum else f"int {self.minimum}..{self.maximum}"
        return self.type


@dataclass(frozen=True)
class Command:
    """A ``draftsmith`` command: one-line summary, its keys, whether it takes ``adapter.*`` overrides."""

    name: str
    summary: str
    keys: tuple[Key, ...]
    overrides: bool = False  # accepts adapter.FIELD=VALUE (Hydra) overrides

    def key(self, name: str) -> Optional[Key]:
        return next((k for k in self.keys if k.name == name), None)


def _adapter(required: bool = False, routed: bool = False) -> Key:
    how = "; routed by the checkpoint's `architectures` when omitted" if routed else ""
    return Key("adapter", "adapter", None, f"adapter name (see `draftsmith adapters`) or a .yaml path{how}",
               required=required)


ADAPTER_DIR = Key("adapter_dir", "path", None, "a folder of extra adapter YAML files (wins over the shipped ones)")
THREADS = Key("threads", "int", None, "torch CPU threads (outputs are bit-identical for any value)", minimum=1)
PROGRESS = Key("progress", "bool", True, "progress bar on stderr (shown only on a terminal)")
OVERWRITE = Key("overwrite", "bool", False, "replace an existing out= that draftsmith wrote (never anything else)")
SEED = Key("seed", "int", 0, "random seed", minimum=0)
FORMAT = Key("format", "enum", "table", "output: human-readable text or one JSON object", choices=("table", "json"))
SOURCE = Key("source", "path", None,
             "drafter checkpoint: a folder, a model root holding the drafter in a known subfolder "
             "(e.g. dspark/), or a Hugging Face repo id org/name[@revision] from the local cache")

TEMPERATURE = Key("temperature", "float", 0.0, "DFlash 2 with a sampled chain (`selector_chain: sampled`): walk the "
                  "selector's path by sampling each step from softmax(row / temperature), Gumbel noise from `seed` "
                  "(0: the greedy walk; refused for a greedy chain, selector=false or a drafter without a selector)",
                  minimum=0)
SELECTOR = Key("selector", "bool", True, "DFlash 2: draft through the candidate selector (false: the plain argmax "
               "of the same drafter; refused for a drafter without a selector)")


def _with(key: Key, **kw) -> Key:
    return Key(**{**key.__dict__, **kw})


#: ``target=`` of ``draft`` and ``eval`` (one resolver: runtime/target_folder.py)
TARGET_HELP = ("the target model: its folder, a model root as downloaded, or a repo id (org/name[@revision]) in "
               "the local Hugging Face cache; default: the model root checkpoint= names, else checkpoint/target")

COMMANDS: dict[str, Command] = {c.name: c for c in (
    Command("synth", "write a synthetic source-format checkpoint (and its borrowed target tensors in out/target)", (
        _adapter(required=True), ADAPTER_DIR,
        Key("out", "path", None, "folder to write", required=True),
        Key("scale", "enum", "tiny", "tiny (seconds, for tests) or full (the real sizes)", choices=("tiny", "full")),
        Key("layout", "enum", "spec", "config layout of a real writer: spec (the adapter's template), "
            "transformers4, transformers5, speculators (speculators adapters only)",
            choices=("spec", "transformers4", "transformers5", "speculators")),
        SEED, OVERWRITE, PROGRESS, THREADS), overrides=True),
    Command("inspect", "print the conversion plan and loading report, no tensor data read (exit 1 if incomplete)", (
        _adapter(routed=True), ADAPTER_DIR, _with(SOURCE, required=True), FORMAT, THREADS), overrides=True),
    Command("convert", "convert a drafter checkpoint (no source=: the embedded tiny synthetic default)", (
        _adapter(routed=True), ADAPTER_DIR, SOURCE,
        Key("out", "path", None, "folder to write (required with source=)"),
        Key("to", "str", "dflash", "output format: dflash (draftsmith's converted format), an adapter name "
            "or an export alias (e.g. speculators: the format of the drafter's family and heads)"),
        Key("verifier", "str", None, "with to=: the verifier's model id or path, for formats that record it "
            "(speculators)"),
        _with(SEED, help="seed of the embedded default (no source=)"), OVERWRITE, FORMAT, PROGRESS, THREADS),
        overrides=True),
    Command("draft", "run one draft step on the PyTorch reference host and print what it drafted", (
        _adapter(), ADAPTER_DIR,
        Key("checkpoint", "path", None, "converted (or source: converted first) drafter folder; "
            "omitted: the embedded tiny synthetic default"),
        Key("target", "path", None, TARGET_HELP),
        Key("device", "str", "cpu", "cpu, cuda or cuda:N"),
        Key("context", "int", 64, "context tokens before the draft step", minimum=1),
        Key("batch", "int", 1, "sequences drafted together", minimum=1),
        _with(SEED, help="seed of the random context and anchors"),
        Key("lowering", "str", None, "one attention lowering for every layer (default: the adapter's per-layer "
            "table for this device)"),
        Key("page_size", "int", 16, "KV cache page size in tokens", minimum=1),
        FORMAT,
        Key("dump", "path", None, "write sequence 0's inputs and outputs to this safetensors file "
            "(its metadata records the dtype)"),
        Key("dtype", "enum", None, "dtype of the step (default: the checkpoint's)",
            choices=("bfloat16", "float16", "float32")),
        _with(OVERWRITE, help="replace a dump= file that draftsmith draft wrote (never anything else)"),
        SELECTOR, TEMPERATURE, PROGRESS, THREADS), overrides=True),
    Command("eval", "acceptance length of greedy speculative decoding with a real target model (docs/eval.md)", (
        _adapter(), ADAPTER_DIR,
        Key("target", "str", None, TARGET_HELP),
        Key("checkpoint", "path", None, "the drafter (converted, or source: converted first; a model root: its "
            "drafter subfolder)", required=True),
        Key("prompts", "path", None, "a JSON-lines file of prompts", required=True),
        Key("max_new_tokens", "int", 64, "tokens generated per prompt", minimum=1),
        Key("device", "str", "cpu", "cpu, cuda or cuda:N"),
        Key("dtype", "enum", None, "dtype of both models (default: each its own)",
            choices=("bfloat16", "float16", "float32")),
        Key("lowering", "str", None, "one attention lowering for every drafter layer"),
        Key("check", "bool", False, "also check the output equals the target's own greedy decode (exit 1 if not)"),
        SELECTOR, FORMAT,
        Key("plot", "path", None, "write an acceptance plot (PNG; needs matplotlib)"),
        _with(OVERWRITE, help="replace a plot= file that draftsmith eval wrote (never anything else)"),
        THREADS), overrides=True),
    Command("emit", "write the TensorRT-LLM custom-model package for an adapter", (
        Key("adapter", "adapter", None, "adapter name (see `draftsmith adapters`) or a .yaml path; default: the "
            "adapter a converted config= records"), ADAPTER_DIR,
        Key("target", "enum", "trtllm", "the engine to emit for", choices=("trtllm",)),
        Key("out", "path", None, "folder to write", required=True),
        Key("backbone", "str", None, "the TensorRT-LLM backbone class: `generated` (from the spec out of "
            "TensorRT-LLM's building blocks), `none`, or `module:Class` (default: the spec's "
            "engine.trtllm_backbone, else generated)"),
        Key("config", "path", None, "a converted config.json (or its folder) to emit for (default: the "
            "adapter's synth.config)"),
        Key("target_architecture", "str", None, "the target model's architectures[0]: the package re-registers "
            "TensorRT-LLM's own class for it so worker processes import the package and build its drafter "
            "(without it they build TensorRT-LLM's own drafter class); default: model='s config.json"),
        Key("model", "path", None, "the target model the drafter serves with (its folder, a model root as "
            "downloaded, or a repo id in the local Hugging Face cache): the printed trtllm-serve line names it "
            "and its config.json gives target_architecture (default: the model root config= names, if any)"),
        _with(OVERWRITE, help="replace an out= package that draftsmith emit wrote (never anything else)"),
        THREADS), overrides=True),
    Command("docs", "regenerate (or check) the generated docs from the adapters and this table", (
        Key("check", "bool", False, "write nothing; print a diff and exit 1 if a generated file is stale"),
        Key("out", "path", None, "docs folder (default: the repository's docs/, README included)"),
        ADAPTER_DIR)),
    Command("init", "infer a starter adapter spec from an unknown checkpoint (TODOs commented)", (
        Key("source", "path", None, "the checkpoint folder", required=True),
        Key("out", "path", None, "the adapter YAML to write (its file name is the adapter name)", required=True),
        _with(OVERWRITE, help="replace an out= that init wrote (never anything else)"))),
    Command("schema", "print (or write) the adapter spec's JSON Schema", (
        Key("out", "path", None, "file to write (default: print)"),
        _with(OVERWRITE, help="replace an out= file that draftsmith schema wrote (never anything else)"))),
    Command("adapters", "list the adapters: name, architectures, family, file", (ADAPTER_DIR,)),
    Command("help", "this help; `draftsmith help COMMAND` lists a command's keys", ()),
)}

ALL_KEYS = sorted({k.name for c in COMMANDS.values() for k in c.keys})


def expand_path(value: str) -> str:
    """``~`` and ``~user`` expanded (the shell does not expand it after ``key=``)."""
    return os.path.expanduser(value)


def parse_value(key: Key, text: str) -> Any:
    """The typed value of ``key=text``; a one-line :class:`UserError` naming both otherwise."""
    bad = f"{key.name}={text}"
    if key.type in ("str", "adapter"):
        if text == "":
            raise UserError(f"{bad}: empty value")
        return text
    if key.type == "path":
        if text == "":
            raise UserError(f"{bad}: empty path")
        return expand_path(text)
    if key.type == "bool":
        low = text.strip().lower()
        if low in ("true", "1"):
            return True
        if low in ("false", "0"):
            return False
        raise UserError(f"{bad}: expected true or false (or 1 / 0)")
    if key.type == "int":
        digits = text.strip()
        if len(digits.lstrip("+-")) > 64:  # no int() of a 5000-digit string (Python's limit is a traceback)
            raise UserError(f"{bad[:80]}...: expected an integer of at most {key.maximum}")
        try:
            n = int(digits, 10)
        except ValueError:
            raise UserError(f"{bad}: expected an integer") from None
        if key.minimum is not None and n < key.minimum:
            raise UserError(f"{bad}: expected an integer >= {key.minimum}")
        if n > key.maximum:
            raise UserError(f"{bad}: expected an integer <= {key.maximum}")
        return n
    if key.type == "float":
        digits = text.strip()
        try:
            x = float(digits) if len(digits) <= 64 else math.nan
        except ValueError:
            x = math.nan
        if not math.isfinite(x):
            raise UserError(f"{bad[:80]}: expected a finite number")
        if key.minimum is not None and x < key.minimum:
            raise UserError(f"{bad}: expected a number >= {key.minimum}")
        return x
    if key.type == "enum":
        if text in key.choices:
            return text
        close = difflib.get_close_matches(text, key.choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"{bad}: expected one of {', '.join(key.choices)}{hint}")
    raise AssertionError(f"key type {key.type!r}")  # the table above is closed


def unknown_key(command: Command, name: str) -> UserError:
    """The error for ``name=...`` given to ``command``: a did-you-mean, and where it applies."""
    names = [k.name for k in command.keys]
    elsewhere = [c.name for c in COMMANDS.values() if c.key(name) is not None]
    known = ", ".join(names + (["adapter.FIELD"] if command.overrides else [])) or "no keys"
    if elsewhere:
        return UserError(f"command line: key {name!r} does not apply to `draftsmith {command.name}` "
                         f"(it is a key of: {', '.join(elsewhere)}); it takes: {known}")
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        hint = f" (did you mean {close[0]!r}?)"
    else:
        other = difflib.get_close_matches(name, ALL_KEYS, n=1)
        hint = f" (did you mean {other[0]!r}? a key of other commands)" if other else ""
    return UserError(f"command line: unknown key {name!r}{hint}; `draftsmith {command.name}` takes: {known}")


def parse_args(command: Command, args: list[str]) -> tuple[dict[str, Any], list[str]]:
    """``key=value`` arguments -> (typed options with every default filled in, the
    ``adapter.*`` overrides left for Hydra). Every mistake is a one-line :class:`UserError`."""
    opts: dict[str, Any] = {k.name: k.default for k in command.keys}
    overrides: list[str] = []
    seen: set[str] = set()
    for a in args:
        bare = a.lstrip("+~")
        if bare.startswith("adapter.") or (a.startswith("~") and bare.startswith("adapter")):
            if not command.overrides:
                raise UserError(f"{a.split('=', 1)[0]}: `draftsmith {command.name}` takes no adapter overrides")
            overrides.append(a)
            continue
        if "=" not in a:
            raise UserError(f"argument {a!r}: expected key=value (see `draftsmith help {command.name}`)")
        name, text = a.split("=", 1)
        key = command.key(name)
        if key is None:
            raise unknown_key(command, name)
        if name in seen:
            raise UserError(f"{name}: given twice")
        seen.add(name)
        opts[name] = parse_value(key, text)
    for k in command.keys:
        if k.required and opts.get(k.name) is None:
            raise UserError(f"draftsmith {command.name}: missing {k.name}=... ({k.help})")
    return opts, overrides


# --------------------------------------------------------------------------------------
# help and docs/cli.md, generated from the table


def _default_text(k: Key) -> str:
    if k.required:
        return "required"
    if k.default is None:
        return "-"
    if isinstance(k.default, bool):
        return "true" if k.default else "false"
    return str(k.default)


def usage() -> str:
    """``draftsmith help``: every command in one line each."""
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: draftsmith COMMAND key=value ...   (draftsmith help COMMAND: its keys)", "", "commands:"]
    lines += [f"  {c.name:<{width}}  {c.summary}" for c in COMMANDS.values()]
    lines += ["", "options: -h/--help, --version. Commands that load an adapter also take adapter.FIELD=VALUE",
              "overrides of any spec field (Hydra syntax; + adds a key the spec does not have)."]
    return "\n".join(lines)


def command_help(name: str) -> str:
    """``draftsmith help NAME`` / ``draftsmith NAME --help``: the command's keys."""
    c = COMMANDS[name]
    lines = [f"usage: draftsmith {c.name} key=value ...", "", c.summary, ""]
    if c.keys:
        w = max(len(k.name) for k in c.keys + (Key("key", "str", None, ""),))
        tw = max(len("type"), *(len(k.type_text()) for k in c.keys))
        dw = max(len("default"), *(len(_default_text(k)) for k in c.keys))
        lines.append(f"  {'key':<{w}}  {'type':<{tw}}  {'default':<{dw}}  help")
        lines += [f"  {k.name:<{w}}  {k.type_text():<{tw}}  {_default_text(k):<{dw}}  {k.help}" for k in c.keys]
    else:
        lines.append("  (no keys)")
    if c.overrides:
        lines += ["", "  adapter.FIELD=VALUE overrides any field of the spec; +adapter.FIELD=VALUE adds one it does not have;",
                  "  a dotted key as spelled or in brackets: adapter.config.fields[dflash_config.block_size].required=true."]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def cli_md() -> str:
    """docs/cli.md: every command and every key (generated; ``draftsmith docs check=true`` keeps it fresh)."""
    out = ["# The `draftsmith` command line", "",
           "<!-- generated by `draftsmith docs` from framework/cli/keys.py: do not edit -->", "",
           "`draftsmith COMMAND key=value ...`. `draftsmith help`, `draftsmith help COMMAND` (or",
           "`draftsmith COMMAND --help`) print the same tables; `draftsmith --version` the version.",
           "A key a command does not read is an error (with a did-you-mean), and so is a value",
           "of the wrong type: one line naming the key and the value, exit status 2.", "",
           "Booleans are `true|false` (or `1|0`); paths may start with `~`. Commands that load an",
           "adapter also take `adapter.FIELD=VALUE` overrides of any spec field",
           "(Hydra syntax: `+adapter.FIELD=VALUE` adds a key the spec does not have, e.g. a",
           "list item: `'+adapter.attention.layers.0.causal=true'`). A key whose name holds dots",
           "(`config.fields`, `synth.tiny`) is written as spelled when it exists",
           "(`adapter.config.fields.dflash_config.selector_unary_order.default=cap_then_scale`) or in",
           "brackets, which also add one (`'+adapter.config.fields[dflash_config.new_key]={default: 1}'`);",
           "those are applied before Hydra's, their values read as YAML.", "",
           "Exit status: 0 ok; 1 `inspect` found an incomplete checkpoint or `docs check=true`",
           "found stale docs; 2 bad input.", ""]
    for c in COMMANDS.values():
        out += [f"## `draftsmith {c.name}`", "", c.summary[0].upper() + c.summary[1:] + ".", ""]
        if c.keys:
            out += ["| key | type | default | what it does |", "| --- | --- | --- | --- |"]
            out += [f"| `{k.name}` | {_cell(k.type_text())} | {_default_text(k)} | {_cell(k.help)} |" for k in c.keys]
        else:
            out.append("No keys.")
        if c.overrides:
            out += ["", "Also `adapter.FIELD=VALUE` overrides."]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
