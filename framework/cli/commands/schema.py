"""``draftsmith schema``: print (or write) the adapter spec's JSON Schema."""

from __future__ import annotations

import json
import sys

from ...io.atomic_file import write_file
from ...spec.schema import is_schema_file, json_schema


def run(opts, spec, path) -> int:
    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if opts.get("out"):
        write_file(opts["out"], text.encode("utf-8"), key="out", command="schema", overwrite=opts["overwrite"],
                   owned=is_schema_file)
        print(f"wrote {opts['out']}")
    else:
        sys.stdout.write(text)
    return 0
