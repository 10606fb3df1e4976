"""Generated docs: ``draftsmith docs [check=true] [out=DIR] [adapter_dir=DIR]``.

This package: ``drafters`` (the supported-drafters table and the README excerpt), ``spec``
(the schema reference and the JSON Schema), ``markdown`` (file names, shared helpers); here,
what ties them together: generate, check freshness, write.

Everything here is a pure function of the adapter specs and the pydantic schema, so the
output is deterministic (no dates, no environment, no hashes):

- ``supported-drafters.md``: the supported-drafters table (TensorRT-LLM supported-models
  style, footnotes from each spec's ``docs`` section) and a feature matrix, one row per
  adapter, derived from the compiled adapter and its flattened full-size config;
- ``adapter-spec.md``: every field of :class:`~.schema.AdapterSpec`, walked recursively
  (type, default, description), with a YAML example per section;
- ``cli.md``: every command and key of the command line, from its one table
  (:func:`~..cli.keys.cli_md`);
- ``adapter-spec.schema.json``: :func:`~.schema.json_schema`, which each shipped adapter
  names in its first line for editors (``# yaml-language-server: $schema=...``);
- the block of ``README.md`` between ``<!-- supported-drafters:begin -->`` and
  ``<!-- supported-drafters:end -->`` (only when writing the repository's own docs and
  only when the README has those markers).

``check=true`` writes nothing: it prints a unified diff of every stale file (and every
shipped adapter missing the schema line) and exits 1.
"""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path

from ...adapters import ADAPTER_DIR
from ..cli.keys import cli_md
from ..errors import UserError
from ..io.atomic_file import head_has, write_file
from ..io.safe_read import read_limited
from .drafters import (Drafter, default_docs_dir, load_drafters, readme_table_excerpt, repo_root,  # noqa: F401
                       serving_config, supported_drafters_md)
from .markdown import (CLI_FILE, README_BEGIN, README_END, SCHEMA_FILE, SCHEMA_LINE, SPEC_FILE, SUPPORTED_FILE,  # noqa: F401
                       TRTLLM_STATUS)
from .spec import adapter_spec_md, is_schema_file, schema_json_text, type_name  # noqa: F401

#: the largest generated file read back (bytes)
MAX_DOC_BYTES = 16 << 20
#: what every generated markdown file's banner holds (:func:`~.markdown._banner`, cli.md's)
GENERATED_SIGNATURE = b"enerated by `draftsmith docs`"

# --------------------------------------------------------------------------------------
# generate / write / check


def generate(adapter_dir: str | Path | None = None, drafters: list[Drafter] | None = None) -> dict[str, str]:
    """File name (relative to the docs folder) -> content."""
    drafters = load_drafters(adapter_dir) if drafters is None else drafters
    return {
        SUPPORTED_FILE: supported_drafters_md(drafters),
        SPEC_FILE: adapter_spec_md(),
        SCHEMA_FILE: schema_json_text(),
        CLI_FILE: cli_md(),
    }


def readme_with_excerpt(text: str, excerpt: str) -> str | None:
    """``text`` with the marked block replaced by ``excerpt``; None without both markers.
    An ``excerpt`` holding a marker (from a spec's text) is refused: the block it would
    write could not be found again."""
    for m in (README_BEGIN, README_END):
        if m in excerpt:
            raise UserError(f"README.md: the generated excerpt holds the marker {m!r} (from an adapter's docs "
                            "text); remove it from the spec")
    b, e = text.find(README_BEGIN), text.find(README_END)
    if b < 0 or e < b:
        return None
    return text[: b + len(README_BEGIN)] + "\n" + excerpt + text[e:]


def check_no_markers(drafters: list[Drafter]) -> None:
    """Refuse (one line per adapter) a spec whose text holds README.md's block markers: the
    block written from it could not be found again (README would grow on every run)."""
    import json

    bad = []
    for d in drafters:
        text = json.dumps(d.spec.model_dump(mode="json"), ensure_ascii=False)
        bad += [f"{d.adapter.path}: a string holds the docs marker {m!r}; remove it" for m in (README_BEGIN, README_END)
                if m in text]
    if bad:
        raise UserError(*bad)


def missing_schema_lines(adapter_dir: Path | None = None) -> list[str]:
    """Shipped adapters whose first line is not the schema line."""
    d = Path(adapter_dir or ADAPTER_DIR)
    bad = []
    for p in sorted(d.glob("*.yaml")):
        first = p.read_text(encoding="utf-8").split("\n", 1)[0].rstrip("\r")
        if first.strip() != SCHEMA_LINE:
            bad.append(f"{p}: first line must be `{SCHEMA_LINE}` (found {first!r})")
    return bad


def _diff(path: Path, old: str | None, new: str) -> str:
    lines = difflib.unified_diff(
        [] if old is None else old.splitlines(keepends=True), new.splitlines(keepends=True),
        fromfile=f"{path}" + ("" if old is not None else " (missing)"), tofile=f"{path} (generated)",
    )
    return "".join(l if l.endswith("\n") else l + "\n\\ No newline at end of file\n" for l in lines)


def targets(out: str | Path | None = None, adapter_dir: str | Path | None = None) -> dict[Path, str]:
    """Every generated file (absolute path -> content). With the default ``out`` (the
    repository's ``docs/``) this includes README.md when it has the markers."""
    out_dir = Path(out) if out not in (None, "") else default_docs_dir()
    drafters = load_drafters(adapter_dir)
    check_no_markers(drafters)
    files = {out_dir / k: v for k, v in generate(adapter_dir, drafters).items()}
    if out in (None, ""):
        readme = repo_root() / "README.md"
        if readme.is_file():
            new = readme_with_excerpt(readme.read_text(encoding="utf-8"), readme_table_excerpt(drafters=drafters))
            if new is not None:
                files[readme] = new
    return files


def _read(path: Path) -> str | None:
    """The exact text of ``path`` (bytes decoded, no newline translation: a ``\r`` stays one),
    None when it is missing."""
    if not os.path.lexists(path):
        return None
    return read_limited(path, MAX_DOC_BYTES, "a generated doc").decode("utf-8", "surrogateescape")


def _stale(out, adapter_dir):
    """``(path, current text or None, generated text)`` of each generated file that differs."""
    for path, new in targets(out, adapter_dir).items():
        old = _read(path)
        if old != new:
            yield path, old, new


def _owned(path: Path) -> bool:
    """A generated file ``docs`` may replace: its banner (markdown), the schema's title (JSON),
    or README.md's markers."""
    if path.name == "README.md":
        return head_has(path, README_BEGIN.encode(), limit=MAX_DOC_BYTES)
    if path.suffix == ".json":
        return is_schema_file(path)
    return head_has(path, GENERATED_SIGNATURE)


def check(out: str | Path | None = None, adapter_dir: str | Path | None = None) -> list[str]:
    """Problems (unified diffs of stale files, adapters missing the schema line); empty if fresh."""
    problems = [_diff(path, old, new) for path, old, new in _stale(out, adapter_dir)]
    return problems + [l + "\n" for l in missing_schema_lines()]


def write(out: str | Path | None = None, adapter_dir: str | Path | None = None) -> list[Path]:
    """Write the stale generated files; return those written."""
    written, stale = [], list(_stale(out, adapter_dir))
    refused = [f"out={path}: exists and was not written by draftsmith docs; refusing to replace it"
               for path, old, _ in stale if old is not None and not _owned(path)]
    if refused:  # checked for every file before any is written
        raise UserError(*refused)
    for path, _, new in stale:
        write_file(path, new.encode("utf-8"), key="out", command="docs", overwrite=True, owned=_owned)
        written.append(path)
    return written


def cli(opts: dict) -> int:
    out, adapter_dir = opts.get("out"), opts.get("adapter_dir")
    if opts.get("check"):
        problems = check(out, adapter_dir)
        if problems:
            sys.stdout.write("".join(problems))
            print("docs are stale: run `draftsmith docs` (with the same out=/adapter_dir=) and commit the result",
                  file=sys.stderr)
            return 1
        print("docs are up to date")
        return 0
    written = write(out, adapter_dir)
    bad = missing_schema_lines()
    for l in bad:
        print(f"warning: {l}", file=sys.stderr)
    for p in written:
        print(f"wrote {p}")
    if not written:
        print("docs already up to date")
    return 0
