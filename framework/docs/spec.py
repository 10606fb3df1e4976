"""``adapter-spec.md`` (every field of the adapter schema, walked) and the JSON Schema."""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from ...transforms import TRANSFORMS
from ..spec.loading import adapter_files, read_spec_data
from ..spec.schema import AdapterSpec, is_schema_file, json_schema  # noqa: F401 (is_schema_file: re-exported)
from .markdown import GUIDE_FILE, SCHEMA_FILE, SCHEMA_LINE, _banner, _code, _table, _yaml

# --------------------------------------------------------------------------------------
# adapter-spec.md: the schema, walked


def _unwrap_optional(ann):
    args = typing.get_args(ann)
    if typing.get_origin(ann) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]), True
    return ann, False


def type_name(ann) -> str:
    """A readable type: ``list[RenameRule]``, ``int | "full" | null``, ``"prefix" | "template"``."""
    if ann is type(None):
        return "null"
    if ann is typing.Any:
        return "any"
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [type_name(a) for a in args if a is not type(None)]
        if type(None) in args:
            parts.append("null")
        return " | ".join(parts)
    if origin in (list, tuple, set):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    if origin is dict:
        return f"dict[{type_name(args[0])}, {type_name(args[1])}]"
    if isinstance(ann, type):
        return ann.__name__
    return str(ann)


def _models_in(ann) -> list[tuple[str, type[BaseModel]]]:
    """The models reachable from an annotation with the path step to them:
    ``""`` (the value itself), ``"[]"`` (a list item) or ``".<key>"`` (a mapping value)."""
    ann, _ = _unwrap_optional(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [("", ann)]
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin in (list, tuple, set) and args:
        return [("[]" + s, m) for s, m in _models_in(args[0])]
    if origin is dict and args:
        return [(".<key>" + s, m) for s, m in _models_in(args[1])]
    if origin in (typing.Union, types.UnionType):
        return [x for a in args for x in _models_in(a)]
    return []


@dataclass
class Section:
    path: str  # e.g. "weights.rename[]" ("" for the top level)
    model: type[BaseModel]
    description: str


def schema_sections(model: type[BaseModel] = AdapterSpec) -> list[Section]:
    """Every model reachable from ``model`` in depth-first field order, with its path."""
    out = [Section("", model, (model.__doc__ or "").strip())]

    def walk(m: type[BaseModel], prefix: str):
        for name, f in m.model_fields.items():
            key = f.alias or name
            for step, sub in _models_in(f.annotation):
                path = f"{prefix}{key}{step}" if not prefix else f"{prefix}.{key}{step}"
                if any(s.path == path for s in out):
                    continue
                out.append(Section(path, sub, f.description or ""))
                walk(sub, path)

    walk(model, "")
    return out


def _constraints(f) -> list[str]:
    out = []
    for m in f.metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                out.append(f"{sym} {getattr(m, attr)}")
        if getattr(m, "min_length", None) is not None:
            out.append(f"at least {m.min_length} item(s)")
        if getattr(m, "pattern", None) is not None:
            out.append(f"matches `{m.pattern}`")
    return out


def _default_value(f) -> tuple[bool, Any]:
    if f.default is not PydanticUndefined:
        return True, f.default
    if f.default_factory is not None:
        return True, f.default_factory()
    return False, None


def _jsonable(v: Any) -> Any:
    if isinstance(v, BaseModel):
        return v.model_dump(mode="json", by_alias=True)
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def default_text(f) -> str:
    if f.is_required():
        return "required"
    _, v = _default_value(f)
    v = _jsonable(v)
    text = yaml.safe_dump(v, default_flow_style=True, width=10_000, sort_keys=False).strip()
    text = text.removesuffix("\n...").removesuffix("...").strip()
    if isinstance(v, int) and not isinstance(v, bool) and v >= 2**20 and v % 2**30 == 0:
        return f"`{text}` ({v // 2**30} GiB)"
    return f"`{text}`"


def _anchor(path: str, model: type[BaseModel]) -> str:
    title = f"{path or 'top level'} {model.__name__}"
    return re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")


def _heading(s: Section) -> str:
    return f"`{s.path}` ({s.model.__name__})" if s.path else f"Top level ({s.model.__name__})"


# the sections the shipped example adapter lacks, as small literal examples
LITERAL_EXAMPLES: dict[str, Any] = {
    "attention.layers.<key>": {"attention": {"layers": {4: {"causal": True, "window": "full"}}}},
    "export": {"export": {"alias": "speculators", "with_heads": True}},
    "": {"name": "acme_dflash", "family": "gqa_dflash", "description": "Acme drafter", "extends": None,
         "target_layer_ids": "output", "max_draft_len": 7},
}
TRIM = 6  # mappings longer than this (below the section's own keys) are trimmed to TRIM - 2 entries


def _example_source() -> tuple[dict | None, str]:
    files = adapter_files()
    for name in sorted(files):
        data, _, _ = read_spec_data(name, files)
        if (data.get("docs") or {}).get("reference_example") is True:
            return data, f"adapters/{name}.yaml"
    return None, ""


def _trim(v: Any, depth: int, trimmed: list[bool]) -> Any:
    if isinstance(v, dict):
        items = list(v.items())
        if depth >= 2 and len(items) > TRIM:
            items = items[: TRIM - 2]
            trimmed.append(True)
        return {k: _trim(x, depth + 1, trimmed) for k, x in items}
    if isinstance(v, list) and depth >= 2 and len(v) > TRIM and all(isinstance(x, dict) for x in v):
        trimmed.append(True)
        return [_trim(x, depth + 1, trimmed) for x in v[: TRIM - 2]]
    return v


def section_example(s: Section, data: dict | None) -> tuple[str, str] | None:
    """(caption, YAML) for section ``s``: from the example adapter where it has the
    section, else a small literal."""
    if s.path in LITERAL_EXAMPLES and (s.path == "" or data is None or _navigate(data, s.path) is None):
        lit = LITERAL_EXAMPLES[s.path]
        if s.path == "":
            base = {k: lit[k] for k in lit if k != "extends"}
            if data is not None:
                base.update({k: v for k, v in data.items() if not isinstance(v, (dict, list))})
            return ("The top-level scalars (`extends:` names a sibling adapter to start from; the loader "
                    "merges it before validation):", _yaml(base, flow=False))
        return "A small example (the shipped adapters do not use this section):", _yaml(lit)
    if data is None:
        return None
    found = _navigate(data, s.path)
    if found is None:
        return None
    trimmed: list[bool] = []
    value = _trim(found, 0 if "<key>" in s.path or "[]" in s.path else 1, trimmed)
    _, src = _example_source()
    caption = f"From `{src}`" + (" (long mappings trimmed):" if trimmed else ":")
    return caption, _yaml(value)


def _navigate(data: Any, path: str) -> Any:
    """The example for ``path``, wrapped in its parent keys (first mapping entry, richest
    list item), or None when the data does not have it."""
    steps = re.findall(r"\.<key>|\[\]|[^.\[]+", path)
    return _nav(data, steps)


def _nav(cur: Any, steps: list[str]) -> Any:
    if not steps:
        return cur
    step, rest = steps[0], steps[1:]
    if step == ".<key>":
        if not isinstance(cur, dict) or not cur:
            return None
        for k, v in cur.items():
            sub = _nav(v, rest)
            if sub is not None:
                return {k: sub}
        return None
    if step == "[]":
        if not isinstance(cur, list) or not cur:
            return None
        best = max(cur, key=lambda x: len(x) if isinstance(x, dict) and _nav(x, rest) is not None else -1)
        sub = _nav(best, rest)
        return None if sub is None else [sub]
    if not isinstance(cur, dict) or step not in cur:
        return None
    sub = _nav(cur[step], rest)
    return None if sub is None else {step: sub}


def _registry_md() -> list[str]:
    """The transform ops and their parameters (the closed registry; import-deterministic)."""
    lines = [
        "## Transform ops (`weights.transforms[].op`)",
        "",
        "Each op's `params` are validated by its own schema when the spec is compiled.",
        "",
    ]
    for name in sorted(TRANSFORMS):
        cls = TRANSFORMS[name]
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        first = doc[0] if doc else ""
        quant = f" Dequantizes `quantization_config.quant_method: {cls.quant_method}`." if cls.quant_method else ""
        lines += [f"### `{name}`", "", (first + quant).strip() or "(no description)", ""]
        fields = cls.Params.model_fields
        if fields:
            lines += _table(["Param", "Type", "Default"],
                            [[_code(k), _code(type_name(f.annotation)), default_text(f)] for k, f in fields.items()])
        else:
            lines.append("No parameters.")
        lines.append("")
    return lines


def adapter_spec_md() -> str:
    data, src = _example_source()
    sections = schema_sections()
    lines = [
        _banner("the pydantic schema in `framework/spec/schema.py`"),
        "",
        "# Adapter spec reference",
        "",
        "An adapter is one YAML file in `adapters/` (or in a folder given as `adapter_dir=DIR`), "
        "validated against `AdapterSpec` (`framework/spec/schema.py`). A spec is data: unknown keys, "
        "`_target_` and every `${` (no interpolation of any kind) are refused; `extends: NAME` starts from a sibling "
        "adapter (mappings merge, lists are replaced). Any field can be overridden on the command line "
        "as `adapter.<path>=VALUE`.",
        "",
        f"For editors, start the file with `{SCHEMA_LINE}` "
        f"([{SCHEMA_FILE}]({SCHEMA_FILE}), also written by `draftsmith schema out=FILE`). "
        f"A walkthrough: [{GUIDE_FILE}]({GUIDE_FILE}).",
        "",
        "Paths: `a.b` is a nested mapping, `a[]` an item of a list, `a.<key>` a value of a mapping "
        "keyed by the user.",
        "",
        "## Sections",
        "",
    ]
    lines += [f"- [{_heading(s)}](#{_anchor(s.path, s.model)})" for s in sections]
    lines += ["- [Transform ops](#transform-ops-weightstransformsop)", ""]
    for s in sections:
        lines += [f'<a id="{_anchor(s.path, s.model)}"></a>', "", f"## {_heading(s)}", ""]
        if s.description:
            lines += [s.description, ""]
        rows = []
        for name, f in s.model.model_fields.items():
            key = f.alias or name
            t = _code(type_name(f.annotation))
            subs = _models_in(f.annotation)
            if subs:
                sub_path = (f"{s.path}.{key}" if s.path else key) + subs[0][0]
                t += f" ([{subs[0][1].__name__}](#{_anchor(sub_path, subs[0][1])}))"
            desc = f.description or ""
            cons = _constraints(f)
            if cons:
                desc += f" Constraints: {', '.join(cons)}."
            rows.append([_code(key), t, default_text(f), desc])
        lines += _table(["Field", "Type", "Default", "Description"], rows)
        lines.append("")
        ex = section_example(s, data)
        if ex is not None:
            caption, text = ex
            lines += [caption, "", "```yaml", text, "```", ""]
    lines += _registry_md()
    return "\n".join(lines).rstrip("\n") + "\n"


def schema_json_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
