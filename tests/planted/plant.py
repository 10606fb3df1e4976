"""Plant one known defect at a time into a copy of the checkout and run the tests meant to catch it.

The catalogue (``defects.yaml`` beside this file) is data: each entry names a product file, an
exact ``old`` text (one unique match in that file) and its ``new`` replacement, and the test
selection (pytest node ids or files, relative to the repository root) that must fail once the
defect is planted. This script never modifies the checkout it is run from: it copies the tracked
and untracked-but-not-ignored files into a temporary folder, plants one defect there, runs that
defect's selection under ``nice -n 19`` with ``PYTHONPATH=<copy>``, restores the file, and records
per defect one outcome:

- ``caught``: the selection failed (pytest exit 1, or 2 when the planted code breaks collection);
- ``missed``: the selection passed with the defect in place (a finding: the suite lost a check);
- ``planter-error``: the entry does not apply (``old`` missing or not unique, file missing), or
  pytest ran nothing / was misused (exit 3, 4, 5), or every selected test skipped, or
  ``--baseline`` found the selection failing on the clean copy;
- ``timeout``: the selection ran past ``--timeout`` seconds.

Usage (from the repository root, with the project's venv active)::

    python tests/planted/plant.py --list            # the catalogue, one line per defect
    python tests/planted/plant.py --check           # every entry still applies (no tests run)
    python tests/planted/plant.py --only ID [--only ID2 ...]
    python tests/planted/plant.py --stage emit      # the defects of one stage
    python tests/planted/plant.py --baseline        # the selections first pass unplanted
    python tests/planted/plant.py --results tests/planted/RESULTS.md   # write the table
    python tests/planted/plant.py --jobs 3          # three defects at once, each in its own copy
    python tests/planted/plant.py --json run.json   # the outcomes, to re-render later:
    python tests/planted/plant.py --render run.json rerun.json --results tests/planted/RESULTS.md

``DRAFTSMITH_READERS_SRC`` and ``DRAFTSMITH_TRTLLM_SRC`` are passed through when set. The file is
not named ``test_*.py`` and ``tests/planted`` holds no tests, so pytest never collects it;
``tests/planted/test_planted_catalogue.py`` runs ``--check``'s logic in CI.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CATALOGUE = HERE / "defects.yaml"
STAGES = ("spec", "compile", "convert", "io", "runtime", "lowering", "transforms", "emit", "eval", "cli", "docs")
KEYS = {"id", "stage", "upstream", "description", "file", "old", "new", "tests"}
REQUIRED = KEYS - {"upstream"}
PASS_ENV = ("DRAFTSMITH_READERS_SRC", "DRAFTSMITH_TRTLLM_SRC")


@dataclass(frozen=True)
class Defect:
    """One planted defect: replace ``old`` (unique in ``file``) by ``new``; ``tests`` must fail."""

    id: str
    stage: str
    description: str
    file: str  # relative to the repository root
    old: str
    new: str
    tests: tuple[str, ...]  # pytest node ids or files, relative to the repository root
    upstream: str | None = None  # the other project whose check this is, if any


@dataclass
class Outcome:
    id: str
    status: str  # caught | missed | planter-error | timeout
    seconds: float
    detail: str = ""
    failed: list[str] = field(default_factory=list)  # the failing node ids pytest reported


def load_catalogue(path: Path = CATALOGUE) -> list[Defect]:
    """The catalogue's entries; refuses in one line a malformed entry or a repeated id."""
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, list):
        raise SystemExit(f"{path}: expected a list of defects")
    out, seen = [], set()
    for i, e in enumerate(raw):
        if not isinstance(e, dict) or not REQUIRED <= set(e) or set(e) - KEYS:
            raise SystemExit(f"{path}: entry {i} needs keys {sorted(REQUIRED)} (optional: upstream), got {e!r:.120}")
        if e["id"] in seen:
            raise SystemExit(f"{path}: id {e['id']!r} repeated")
        if e["stage"] not in STAGES:
            raise SystemExit(f"{path}: {e['id']}: stage {e['stage']!r} not one of {', '.join(STAGES)}")
        tests = e["tests"]
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t for t in tests):
            raise SystemExit(f"{path}: {e['id']}: tests must be a non-empty list of node ids")
        if e["old"] == e["new"]:
            raise SystemExit(f"{path}: {e['id']}: old and new are the same")
        seen.add(e["id"])
        out.append(Defect(e["id"], e["stage"], e["description"], e["file"], e["old"], e["new"], tuple(tests), e.get("upstream")))
    return out


def applies(d: Defect, root: Path) -> str | None:
    """Why ``d`` cannot be planted in the tree at ``root`` (None when it can)."""
    f = root / d.file
    if not f.is_file():
        return f"{d.file}: no such file"
    n = f.read_text().count(d.old)
    if n != 1:
        return f"{d.file}: old text found {n} times (needs exactly 1)"
    for t in d.tests:
        p = root / t.split("::", 1)[0]
        if not p.exists():
            return f"test selection {t}: no such file"
    return None


def copy_checkout(src: Path, dst: Path) -> None:
    """Tracked and untracked-but-not-ignored files of ``src`` into ``dst`` (no .git, no caches)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=src, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for rel in filter(None, listed):
        s = src / rel
        if not s.is_file():  # deleted but still in the index
            continue
        t = dst / rel
        t.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, t)


def _env(copy: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PASS_ENV and k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(copy)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no stale .pyc between a planted and a restored file
    for k in PASS_ENV:
        if os.environ.get(k):
            env[k] = os.environ[k]
    return env


def run_selection(tests: tuple[str, ...], copy: Path, timeout: float) -> tuple[int | None, str]:
    """pytest on ``tests`` in ``copy`` under nice; (exit code or None on timeout, output tail)."""
    cmd = ["nice", "-n", "19", sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           "-o", "addopts=", "-rf", "--tb=line", *tests]
    try:
        p = subprocess.run(cmd, cwd=copy, env=_env(copy), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out[-2000:]
    return p.returncode, (p.stdout + p.stderr)[-4000:]


def _failed(out: str) -> list[str]:
    return [ln.split()[1] for ln in out.splitlines() if ln.startswith(("FAILED ", "ERROR ")) and len(ln.split()) > 1]


def plant_and_run(d: Defect, copy: Path, timeout: float, baseline: bool) -> Outcome:
    """Plant ``d`` in ``copy``, run its selection, restore the file; the outcome."""
    t0 = time.monotonic()
    why = applies(d, copy)
    if why:
        return Outcome(d.id, "planter-error", 0.0, why)
    if baseline:
        rc, out = run_selection(d.tests, copy, timeout)
        if rc != 0:
            return Outcome(d.id, "planter-error", time.monotonic() - t0,
                           f"selection does not pass unplanted (exit {rc})", _failed(out or ""))
    f = copy / d.file
    original = f.read_text()
    f.write_text(original.replace(d.old, d.new, 1))
    t1 = time.monotonic()
    try:
        rc, out = run_selection(d.tests, copy, timeout)
    finally:
        f.write_text(original)
    secs = time.monotonic() - t1
    if rc is None:
        return Outcome(d.id, "timeout", secs, f"ran past {timeout:.0f} s")
    if rc in (1, 2):
        return Outcome(d.id, "caught", secs, f"exit {rc}", _failed(out))
    if rc == 0 and not re.search(r"\b\d+ passed\b", out):  # all skipped: no test looked at the defect
        return Outcome(d.id, "planter-error", secs, "the selection ran no test (all skipped)")
    if rc == 0:
        return Outcome(d.id, "missed", secs, "selection passed with the defect planted")
    return Outcome(d.id, "planter-error", secs, f"pytest exit {rc}: {out.strip().splitlines()[-1] if out.strip() else ''}")


def results_markdown(outcomes: list[Outcome], defects: dict[str, Defect], commit: str) -> str:
    n = {s: sum(o.status == s for o in outcomes) for s in ("caught", "missed", "planter-error", "timeout")}
    lines = [
        "# Planted defects: results",
        "",
        f"Run against commit `{commit}` with `python tests/planted/plant.py` "
        f"({len(outcomes)} defects: {n['caught']} caught, {n['missed']} missed, "
        f"{n['planter-error']} planter errors, {n['timeout']} timeouts; "
        f"{sum(o.seconds for o in outcomes):.0f} s of test time under `nice -n 19` on the shared 2-core machine).",
        "",
        "| id | stage | upstream | outcome | caught by (first failing test) | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        d = defects[o.id]
        by = o.failed[0] if o.failed else o.detail
        lines.append(f"| {o.id} | {d.stage} | {d.upstream or ''} | {o.status} | `{by}` | {o.seconds:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--catalogue", type=Path, default=CATALOGUE)
    ap.add_argument("--list", action="store_true", help="print the catalogue and exit")
    ap.add_argument("--check", action="store_true", help="verify every entry applies (unique old) and exit")
    ap.add_argument("--only", action="append", default=[], metavar="ID", help="run only this defect (repeatable)")
    ap.add_argument("--stage", action="append", default=[], choices=STAGES, help="run only this stage's defects")
    ap.add_argument("--baseline", action="store_true", help="first check each selection passes unplanted")
    ap.add_argument("--tests", nargs="+", metavar="NODE", help="run these instead of the entry's selection (to explore)")
    ap.add_argument("--jobs", type=int, default=1, help="defects planted at once, each in its own copy")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per selection run")
    ap.add_argument("--json", type=Path, help="write the outcomes as JSON here")
    ap.add_argument("--results", type=Path, help="write the results table (markdown) here")
    ap.add_argument("--source", type=Path, default=REPO, help="the checkout to copy (default: this one)")
    ap.add_argument("--render", type=Path, nargs="+", metavar="JSON",
                    help="plant nothing: write --results from saved --json outcomes (a later file wins per id)")
    a = ap.parse_args(argv)

    defects = load_catalogue(a.catalogue)
    by_id = {d.id: d for d in defects}
    unknown = [i for i in a.only if i not in by_id]
    if unknown:
        print(f"unknown defect id(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    if a.list:
        for d in defects:
            up = f" [{d.upstream}]" if d.upstream else ""
            print(f"{d.id:32} {d.stage:10} {d.file}{up}: {d.description}")
        return 0
    if a.check:
        bad = [(d.id, w) for d in defects if (w := applies(d, a.source))]
        for i, w in bad:
            print(f"{i}: {w}")
        print(f"{len(defects) - len(bad)}/{len(defects)} defects apply")
        return 1 if bad else 0

    if a.render:
        saved: dict[str, Outcome] = {}
        for f in a.render:
            for o in json.loads(f.read_text()):
                saved[o["id"]] = Outcome(**o)
        missing = [d.id for d in defects if d.id not in saved]
        if missing or not a.results:
            print(f"--render needs --results and an outcome for every defect; none for: {', '.join(missing)}",
                  file=sys.stderr)
            return 2
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=a.source, capture_output=True,
                                text=True).stdout.strip()
        a.results.write_text(results_markdown([saved[d.id] for d in defects], by_id, commit))
        return 0

    chosen = [d for d in defects if (not a.only or d.id in a.only) and (not a.stage or d.stage in a.stage)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=a.source, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=a.source,
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        commit += " (with uncommitted changes)"
    if a.tests:
        chosen = [dataclasses.replace(d, tests=tuple(a.tests)) for d in chosen]
    jobs = max(1, min(a.jobs, len(chosen)))
    results: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="draftsmith-planted-") as tmp:
        copies: queue.Queue[Path] = queue.Queue()
        for j in range(jobs):  # one copy per worker: a worker plants one defect at a time in its own
            copy = Path(tmp) / f"checkout{j}"
            copy_checkout(a.source, copy)
            copies.put(copy)

        def work(d: Defect) -> Outcome:
            copy = copies.get()
            try:
                o = plant_and_run(d, copy, a.timeout, a.baseline)
            finally:
                copies.put(copy)
            extra = f" ({o.failed[0]})" if o.failed else (f" ({o.detail})" if o.detail else "")
            print(f"{o.status:13} {o.seconds:6.1f}s {d.id}{extra}", flush=True)
            return o

        with ThreadPoolExecutor(jobs) as pool:
            for o in pool.map(work, chosen):
                results[o.id] = o
    outcomes = [results[d.id] for d in chosen]
    n = {s: sum(o.status == s for o in outcomes) for s in ("caught", "missed", "planter-error", "timeout")}
    print(f"{len(outcomes)} defects: " + ", ".join(f"{v} {k}" for k, v in n.items()))
    if a.json:
        a.json.write_text(json.dumps([o.__dict__ for o in outcomes], indent=1) + "\n")
    if a.results:
        a.results.write_text(results_markdown(outcomes, by_id, commit))
    return 0 if n["caught"] == len(outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
