"""``draftsmith init``: infer a starter adapter spec from an unknown checkpoint (the inferrer is
:mod:`draftsmith.framework.starter`); ``source=`` is resolved as ``convert`` resolves it."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import yaml

from ...convert.locate import given_folder, locate
from ...errors import UserError
from ...io.atomic_file import check_file_replaceable, write_file
from ...shown import is_shown_as_is, shown
from ...starter.infer import infer, written_by_init
from ..inputs import subfolders


def run(opts, spec, path) -> int:
    """``init`` from composed options; a model root's drafter sits in a subfolder some adapter
    declares (``match.subfolders``), as for ``convert``."""
    source = opts.get("source")
    out = opts.get("out")
    if not source:
        raise UserError("draftsmith init: missing source=...")
    if not out:
        raise UserError("draftsmith init: missing out=FILE (the adapter YAML to write)")
    for key, value in (("source", source), ("out", out)):
        if not is_shown_as_is(str(value)):
            raise UserError(f"{key}={shown(value)}: the path holds a newline or another control character, "
                            "which the spec's comments cannot carry: rename it")
    out = Path(out)
    if os.path.lexists(out):  # refused before reading the source; checked again when written
        check_file_replaceable(out, "out", bool(opts.get("overwrite")), "init", written_by_init)
    if out.suffix != ".yaml":
        raise UserError(f"out={out}: an adapter file ends in .yaml")
    name = out.stem
    if not re.match(r"^[a-z][a-z0-9_]*$", name):
        raise UserError(f"out={out}: the file name is the adapter name: lowercase letters, digits, _")
    found = locate(str(source), subfolders(None, opts), key="source")
    sub = found.path.name if found.path != given_folder(str(source), "source")[0] else None
    if found.how:
        print(f"source={source}: using {found.path} ({found.how})", file=sys.stderr)
    try:
        res = infer(found.path, name, out, str(source), sub)
    except yaml.YAMLError as e:  # a config string YAML cannot carry (control characters): one line
        raise UserError(f"source={source}: config.json holds a value a spec cannot carry "
                        f"({shown(str(e).splitlines()[0] if str(e) else type(e).__name__)})") from None
    write_file(out, res.yaml.encode("utf-8"), key="out", command="init", overwrite=bool(opts.get("overwrite")),
               owned=written_by_init)
    print(f"wrote {out} ({len(res.todos)} TODO{'s' if len(res.todos) != 1 else ''})")
    for t in res.todos:
        print(f"  TODO: {t}")
    print(f"next: draftsmith inspect adapter={out} source={source}")
    return 0
