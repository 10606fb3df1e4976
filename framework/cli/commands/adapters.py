"""``draftsmith adapters``: name, architectures, family, file of every known adapter."""

from __future__ import annotations

from ...errors import UserError
from ...spec.loading import adapter_files, load_spec


def run(opts, spec, path) -> int:
    rows = [("name", "architectures", "family", "file")]
    for name, f in sorted(adapter_files(opts.get("adapter_dir")).items()):
        try:
            s, _ = load_spec(name, adapter_dir=opts.get("adapter_dir"))
            rows.append((name, ", ".join(s.match.architectures), s.family, str(f)))
        except UserError as e:
            rows.append((name, f"(invalid: {e.problems[0]})", "-", str(f)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
    return 0
