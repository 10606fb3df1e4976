"""Regenerate ``docs/reliability.md`` from a run of the hostile-input tests.

Runs ``pytest`` on the four reliability test files with ``DRAFTSMITH_RELIABILITY_LOG`` set;
each test appends one JSON line per case that ended the way the test demands
(``tests/support/reliability_log.py``), and this script counts them by area, kind and result.
Nothing here is hand-typed: rerun it and the numbers change with the random draws.

    python bench/reliability_report.py            # writes docs/reliability.md
    python bench/reliability_report.py --print    # prints it instead
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/hostile/test_hostile_specs.py", "tests/hostile/test_hostile_checkpoints.py", "tests/hostile/test_hostile_bounds.py",
         "tests/hostile/test_hostile_draft.py", "tests/hostile/test_hostile_runs.py", "tests/io/test_interrupt.py",
         "tests/hostile/test_hostile_outputs.py", "tests/convert/test_determinism.py", "tests/hostile/test_hostile_allocation.py",
         "tests/hostile/test_hostile_inputs4.py", "tests/compile/test_published_configs.py",
         "tests/hostile/test_hostile_ownership.py", "tests/hostile/test_hostile_overrides.py", "tests/hostile/test_hostile_yaml.py"]
AREAS = {
    "specs": "Adapter specs (`draftsmith inspect adapter=... adapter_dir=...`, in-process)",
    "checkpoints": "Checkpoints (`draftsmith convert`, a fresh synthetic tiny MiniMax DSpark checkpoint corrupted at random)",
    "bounds": "Bounded work (`inspect`/`convert`: huge headers, regexes, FIFOs and devices, oversize and malformed JSON, unwritable destinations)",
    "draft": "Converted checkpoints under `draftsmith draft` (NaN weights, invalid config values, escaping index, huge contexts)",
    "runs": "Concurrent runs and signals (SIGTERM, SIGHUP)",
    "interrupt": "Interrupted conversions (SIGKILL)",
    "outputs": "Outputs, bounds, scratch, names and docs (issue 40: `draft dump=`, `schema out=`, `docs`, `init`, "
               "`emit`, `eval`; Hugging Face revisions, eval prompts, config sizes, `threads`; killed runs' scratch; "
               "hostile tensor names)",
    "determinism": "Determinism",
    "round4": "Allocations bounded first, one line, published configs (issue 46: DFlash 2 selector and "
              "convolution, eval context and tokens, convert memory and disk, index shards, symlinked shards, "
              "JSON Lines prompts, emit's package data, FIFOs in cached revisions, published configs)",
    "ownership": "Only what draftsmith made (issue 46: folders named like draftsmith's temps, backups and scratch; "
                 "interrupted replaces; deep old outputs)",
    "overrides": "Overrides are data (issue 46/47: instantiation keys, list steps, bounds, values a spec cannot hold, "
                 "overrides that change nothing, `docs` serving snippets)",
    "yaml": "Spec YAML bounds (issue 46: aliases, bytes expanded through aliases, key length)",
}
DEMANDS = {
    "specs": "exit 2; every stderr line `error: <spec file>[:line]: <key path>: ...`; no traceback; "
             "did-you-mean for misspelt keys; no code runs (a marker resolver / Python tags never fire).",
    "checkpoints": "exit 2; one-line errors naming the tensor and the file (the folder for a tensor no file holds); "
                   "nothing at the destination and no temp dir beside it.",
    "bounds": "exit 2 (or a bounded-time refusal), one `error:` line per problem naming the file (and key or "
              "tensor), within the stated seconds; nothing at the destination; a FIFO or device never opened.",
    "draft": "exit 2 with one `error:` line naming the key, file or first non-finite layer; never exit 0 with "
             "garbage tokens; `format=json` always valid JSON.",
    "runs": "a live run's temp dir is never removed by another run; a signalled run exits 128+signal and leaves "
            "nothing at or beside the destination.",
    "interrupt": "after the kill: nothing at a fresh destination (only the run's own `.out.tmp-*`), an old output "
                 "intact or the complete new one when replacing; the next run succeeds, byte-identical to an "
                 "uninterrupted run, and leaves only `out`.",
    "determinism": "byte-identical outputs.",
    "round4": "a size that reaches an allocation is checked before it (every bound tried at exactly the limit, "
              "accepted, and one byte or one unit past it, refused); a refusal is exit 2 with one `error:` line "
              "naming the file, key, tensor or argument, nothing written and nothing of a linked file's bytes "
              "shown; valid input (published configs, Unicode in JSON strings, taps past the block) is accepted.",
    "ownership": "a planted folder without draftsmith's owner record (every name pattern draftsmith uses: `.<out>.tmp-*`, "
                 "`.<out>.old-*`, `draftsmith-scratch-*`, `.draftsmith-export-*`, a copied or renamed record) is "
                 "snapshotted (path, bytes, mode of every entry) before and after every writing command and is "
                 "unchanged; nothing of ours is left beside `out=` after a signalled run or after the run that follows "
                 "a SIGKILL; `out=` holds the old or the new output.",
    "overrides": "exit 2 with one line `command line: <the argument>: ...` saying what is wrong (never Hydra's `Error "
                 "merging override`, never a traceback), in milliseconds for a bound; every bound tested just under "
                 "(accepted) and just over (refused).",
    "yaml": "exit 2 (or `ValueError` from the loader) with one line naming the file and line before anything copies "
            "the data; every bound tested just under (loaded) and just over (refused).",
    "outputs": "exit 2 with one `error:` line per problem naming the key or file, names escaped (no raw newline, "
               "ANSI escape, bidi mark or lone surrogate), no traceback; no file outside draftsmith's own outputs "
               "changes (a planted folder is snapshotted before and after every test); no temp file left; a "
               "killed run's scratch removed by the next run.",
}


#: what was tried and what happened before, per area (prose before the table)
NOTES = {
    "round4": [
        "Tried (issue 46) and what happened before: a DFlash 2 `selector_top_k` equal to a 151 936-token "
        "vocabulary reached the allocator (`DefaultCPUAllocator: can't allocate memory`, 646 GB); `eval "
        "max_new_tokens=2000000000` on a target claiming 2^40 positions reached the allocator too (a 256 GB drafter KV cache); `convert` "
        "read a tensor before any check of its size against memory; a `conv_kernel_size` past the block "
        "crashed `draft` with a traceback and `convert to=speculators` wrote a checkpoint speculators' "
        "loader refuses (`kernel_size (4) cannot exceed block_size (3)`); an eval prompt token past the "
        "vocabulary was not checked; a shard symlinked to another file had that file's first 8 bytes quoted "
        "(as the header length); a JSON Lines prompt holding U+2028 was refused as not JSON (`str.splitlines`); "
        "`emit` wrote a `resolved.json` larger than the package's import reads; a FIFO in a cached revision "
        "was left to whichever reader met it (elsewhere in the revision the run went on beside it); the Kimi-K3 DSpark speculator's config "
        "(`transformer_layer_config.flex_attention_backend`) was refused whole.",
        "",
        "What happens now: the draft estimate counts the selector (`framework/runtime/memory.py` "
        "`selector_bytes`) and `run_draft`'s own check does too; `eval` checks every prompt id against both "
        "vocabularies and the longest sequence's KV caches and prefill logits against free memory "
        "(`framework/eval/bounds.py`); `convert` checks its largest group against `MemAvailable` and its output "
        "against the destination's free disk before reading (`framework/convert/execute.py` `check_plan_fits`); "
        "an index lists at most 65 536 shards; taps past the block add nothing (as TensorRT-LLM, z-lab and "
        "llama.cpp compute it) and `export.unsupported: conv_over_block` refuses the speculators export; a "
        "shard linking out of its folder (or, in a cached revision, its repo's `blobs/`) is refused by name; "
        "prompt files split lines at `\\n` only; `emit` checks the written size against "
        "`names.MAX_PACKAGE_DATA_BYTES`, the constant the import reads with; every entry of a cached revision "
        "is `stat`ed (never opened) and anything but folders and regular files refused; attention backend "
        "choices and training-only keys are declared irrelevant by the family, each with its reason in the "
        "loading report, and any other key is still refused.",
        "",
    ],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print", action="store_true", help="print the document instead of writing docs/reliability.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        log = Path(td) / "cases.jsonl"
        env = dict(os.environ, DRAFTSMITH_RELIABILITY_LOG=str(log))
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfE", *TESTS],
                           cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        rows = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
    tail = [l for l in p.stdout.strip().splitlines() if l.strip()][-5:]
    counts = collections.Counter((r["area"], r["kind"], r["result"]) for r in rows)
    tests: dict[tuple, set] = collections.defaultdict(set)
    for r in rows:
        if r.get("test"):
            tests[(r["area"], r["kind"], r["result"])].add(r["test"].split("::")[-1])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    out = ["# Reliability: hostile input", "",
           "<!-- generated by bench/reliability_report.py; do not edit by hand -->", "",
           "What draftsmith does with bad input: malformed or malicious adapter specs, corrupted checkpoints, "
           "conversions killed midway, and whether its output depends on anything but its input. Every case "
           "below is drawn at random (hypothesis strategies, random seeds, random kill points) by the tests "
           f"in {', '.join(f'`{t}`' for t in TESTS)}; a case is counted only after every assertion on it held.",
           "",
           f"Last run: commit `{commit or '?'}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
           f"pytest exit code {p.returncode} ({'all passed' if p.returncode == 0 else 'FAILURES, see below'}), "
           f"{wall:.0f} s wall, {len(rows)} cases.", ""]
    for area, title in AREAS.items():
        items = sorted((k, r, n) for (a, k, r), n in counts.items() if a == area)
        out += [f"## {title}", "", *NOTES.get(area, []), f"Demanded of every case: {DEMANDS[area]}", "",
                "| Case | Count | Result | Test |", "|---|---:|---|---|"]
        out += [f"| {k} | {n} | {r} | {', '.join(f'`{t}`' for t in sorted(tests[(area, k, r)]))} |"
                for k, r, n in items]
        out += [f"| **total** | **{sum(n for _, _, n in items)}** | | |", ""]
    out += ["## Limits and policies these tests hold the code to", "",
            "- Spec YAML: safe loader only (no Python tags); at most 1 MiB, 100,000 nodes and 4 MiB of scalar text "
            "after alias expansion (bytes counted once per path through aliases), 1,000 aliases, keys of at most "
            "1,024 characters; recursive aliases, duplicate keys and non-UTF-8 files refused.",
            "- Overrides: checked as data before Hydra or the library parses them: keys at most 256 characters and 32 "
            "steps, values at most 65,536 characters, numbers at most 64 digits, integers within 2^63-1, floats "
            "finite; list steps plain ASCII indices within the list (`+` adds exactly one, at the end); an instantiation "
            "key (`_target_`, `_args_`, `_partial_`, `_recursive_`, `_convert_`) or `${` refused in a key, a value, a "
            "mapping or a list item; a value a spec cannot hold (a date, a set, bytes) refused; an override that "
            "changes nothing (`config.default_dtype` on a config.json that names its dtype) refused.",
            "- Spec code: `_target_` keys and every `${` (no interpolation of any kind: references, resolvers, "
            "nested tricks such as `${oc.${x}:HOME}`) refused anywhere in a spec, keys included, and again on the "
            "final composed tree of the command line (Hydra composes with `resolve=False`).",
            "- `extends:` takes an adapter name (`[a-z][a-z0-9_]*`), never a path; cycles are reported with the chain.",
            "- Regexes: at most 512 characters, compiled with RE2 (google-re2) at load time and matched by it: "
            "linear time, so no pattern can hang a run (`.*.*.*.*.*.*!` on 100 000-character names runs in "
            "milliseconds); lookaround and backreferences refused. Name templates also run under RE2.",
            "- Files: only regular files are opened (`stat` before a non-blocking `open`, `fstat` after: FIFOs, "
            "devices, directories refused); byte limits counted while reading (spec 1 MiB, config.json 16 MiB, "
            "index 64 MiB, header 100 MB); JSON strict (no NaN/Infinity, no float overflow, no integer past "
            "4300 digits, nesting at most 64).",
            "- Plans: linear in tensor count (`bench/many_tensors.py`: 100 000 tensors); `convert` lists 200 "
            "problems and counts the rest.",
            "- Flattened configs: types and ranges of the math-bearing keys checked before anything is written "
            "(`framework/compile/config_types.py`), and again by `ResolvedDrafter` (strict fields) when `draft` "
            "loads a checkpoint.",
            "- `draft`: memory estimated before allocating (refused past the device's free memory); non-finite "
            "logits stop the run naming the first non-finite layer.",
            "- Temp dirs: `.<out>.tmp-<pid>-<token>/` with draftsmith's owner record beside it (a symbolic link "
            "`<name>.draftsmith-owner` whose text names the folder and its token, pid, start time and host: created "
            "before the folder, removed after it, so a run killed at any instant leaves nothing or what a record "
            "names: `tests/io/test_interrupt.py::test_creation_and_removal_stopped_at_any_step_leave_only_owned_things`); "
            "the output is built in its `build/` and a replaced output moves into it (never beside `out=`); removed "
            "by another run only when the record is intact and its owner gone (same host); a folder without the "
            "record is never read, moved or removed, whatever its name; removal walks any depth iteratively; found "
            "by exact name comparison, never a glob of the output name. "
            "SIGTERM/SIGHUP clean up like Ctrl-C; cleanup runs with those signals blocked.",
            "- Checkpoints: safetensors headers are checked against the file before any data is read (sizes, "
            "dtypes, offsets that must tile the data exactly); duplicate names across shards, index entries "
            "that point at a missing shard or at a shard that does not hold the tensor are refused; MXFP8 "
            "weights must be F8_E4M3 and scales U8/F8_E8M0 of shape `[rows, ceil(cols/32)]`; scale byte 255 "
            "and any NaN/Inf in an output tensor are refused.",
            "- Ownership: a folder's marker names the command that wrote it; `overwrite=true` replaces only the "
            "same kind of output (`emit` never replaces a checkpoint `convert` wrote). Single files (`schema out=`, "
            "`docs`, `init out=`, `draft dump=`, `eval plot=`) are replaced only when they carry that command's "
            "signature (schema title, docs banner, init header, dump metadata, PNG Software chunk), never through "
            "a symbolic link; written to `.<name>.tmp-<pid>-<random>` opened `O_CREAT|O_EXCL|O_NOFOLLOW`, fsynced "
            "and renamed; removed on every error (a full disk leaves nothing).",
            "- Bounds: Hugging Face revisions resolved inside the cache only (no `..`, no absolute part; ref files "
            "through the hardened reader, at most 256 bytes); eval prompts at most 1 MiB each, 100 000 per file, "
            "tokens + max_new_tokens + drafts within the target's `max_position_embeddings`; config sizes bounded "
            "(`block_size` <= 4096, heads <= 4096, vocab <= 2^24) and the draft step's scores and logits in the "
            "memory estimate; every integer key <= 2^31-1 and at most 64 digits; `threads` <= the CPUs this "
            "process may use.",
            "- Allocations (issue 46): the draft step's estimate includes DFlash 2's candidate selector (sort and "
            "path logits over the vocabulary, `4 k r` gathered codebook values, `2 k k` pairwise scores per drafted "
            "position); `eval`: prompt ids inside both vocabularies, the longest sequence's drafter and target KV "
            "and prefill logits within the device's free memory; `convert`: the largest group (sources, outputs, "
            "two queued output groups) within `MemAvailable`, the output within the destination's free disk; an "
            "index names at most 65 536 shard files; `resolved.json` at most `names.MAX_PACKAGE_DATA_BYTES` "
            "(4 MiB) on both sides of `emit`; a cached revision walked by `stat` (at most 100 000 entries, 32 "
            "levels), FIFOs, devices and sockets refused.",
            "- Scratch: `draft`/`eval` conversions and `convert to=`'s export copy live in owned folders "
            "(`draftsmith-scratch-<pid>-<token>`, `.draftsmith-export-<pid>-<token>`, each with its owner record) "
            "removed on exit and, after a SIGKILL, by the next run; a folder of another program with a matching "
            "name is never touched.",
            "- Output: written into `.<out>.tmp-<pid>-*` beside the destination and renamed into place; an "
            "existing destination is replaced only with `overwrite=true`, by an atomic exchange "
            "(`renameat2(RENAME_EXCHANGE)`; elsewhere a move of the old output into the owned temp folder, undone on "
            "a signal at once and after a SIGKILL by the next run). The interruption tests install "
            "a step hook (`framework/io/publish.py`, `set_step_hook`) that SIGKILLs at the N-th step point.",
            ""]
    if p.returncode != 0:
        out += ["## Failures in the last run", "", "```", *p.stdout.strip().splitlines()[-40:], "```", ""]
    else:
        out += ["pytest: " + tail[-1].strip("= "), ""] if tail else []
    text = "\n".join(out)
    if args.print:
        print(text)
    else:
        (ROOT / "docs" / "reliability.md").write_text(text)
        print(f"wrote docs/reliability.md ({len(rows)} cases, pytest exit {p.returncode})")
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
