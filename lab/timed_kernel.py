"""The phase-timer build of the product's Gluon kernel, kept in the lab.

The product kernel (``lowering/gluon_window_block.py``) carries no timer. This builds one at
run time: today's kernel with ``lab/kernel_phases.patch`` applied (no second copy of the kernel
is kept by hand), loaded as its own module beside the product's (``gluon_ab.kernel_at``). Its
``launch(timer=...)`` stamps each program's phases and the time the ring's two sides waited
for each other into an int64 ``[N * Hkv, num_splits, len(TIMER_SLOTS)]`` tensor
(``lab/kernel_phases.py`` reads it); without ``timer`` it runs untimed.

The patch is a unified diff with context, applied strictly (a hunk's lines must match
exactly, anywhere after the previous hunk, nearest its stated line): a kernel edit that
moves what the timer hooks into makes :func:`timed_source` fail, naming the hunk
(``lab/tests/test_timed_kernel.py`` checks it on CPU). Then:
``PYTHONPATH=. python3 lab/timed_kernel.py --write /tmp/timed.py`` (the last version that
applied: ``--base REV``), port the timer to today's kernel in that file, and
``--refresh /tmp/timed.py`` rewrites the patch against today's kernel.

A kernel variant (``lab/variants/X.patch``) names the product kernel it applies to on a header line
``Kernel: <git blob id>``, so that a kernel edit leaves every variant reproducible:
:func:`variant_source` applies it (after its ``On top of:`` chain) to that kernel, from git, or
from ``lab/.kernels/`` on a tree without .git (``--kernels`` writes it; carry it to the GPU machine).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "lowering/gluon_window_block.py"
PATCH = Path(__file__).with_name("kernel_phases.patch")
KERNELS = Path(__file__).with_name(".kernels")  # <blob id>.py: kernels variants name, for a tree without .git
VARIANTS = Path(__file__).with_name("variants")
PORTS = VARIANTS / "timers"  # the timer ported to a variant: timers/<variant's name>
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """The patch does not apply (one line: which hunk, and the first line it looked for)."""


def _hunks(patch: str) -> list[tuple[int, list[str], list[str], str]]:
    """``(old start line, old lines, new lines, header)`` per hunk of a unified diff."""
    hunks, cur = [], None
    for line in patch.splitlines():
        m = HUNK.match(line)
        if m:
            cur = (int(m.group(1)), [], [], line)
            hunks.append(cur)
        elif cur is None or line.startswith("\\"):
            continue  # file headers; "\ No newline at end of file"
        else:
            tag, body = (line[0], line[1:]) if line else (" ", "")  # an editor may strip a blank context line
            if tag in " -":
                cur[1].append(body)
            if tag in " +":
                cur[2].append(body)
            if tag not in " -+":
                raise PatchError(f"{PATCH.name}: not a unified-diff line in hunk {cur[3]!r}: {line[:60]!r}")
    return hunks


def apply(text: str, patch: str, what: str = KERNEL, name: str = PATCH.name) -> str:
    """``text`` with unified diff ``patch`` (named ``name`` in errors) applied, each hunk where its
    old lines match exactly; :class:`PatchError` if one matches nowhere after the previous hunk."""
    src = text.splitlines()
    out, pos, shift = [], 0, 0
    hunks = _hunks(patch)
    if not hunks:
        raise PatchError(f"{name}: no hunks")
    for n, (start, old, new, header) in enumerate(hunks, 1):
        want = max(start - 1 + shift, pos)
        found = [p for p in range(pos, len(src) - len(old) + 1) if src[p:p + len(old)] == old]
        if not found:
            first = next((l for l in old if l.strip()), "")
            raise PatchError(f"{name} no longer applies to {what}: hunk {n} ({header}) matches nowhere "
                             f"(its first line: {first.strip()[:70]!r})")
        at = min(found, key=lambda p: abs(p - want))
        out += src[pos:at] + new
        pos, shift = at + len(old), at - (start - 1)
    return "\n".join(out + src[pos:]) + "\n"


def kernel_text(rev: str | None = None) -> str:
    """Today's product kernel, or git revision ``rev``'s."""
    if rev is None:
        return (ROOT / KERNEL).read_text()
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{KERNEL}"], capture_output=True, text=True)
    if shown.returncode != 0:
        raise PatchError(f"--base {rev}: git has no {KERNEL} there")
    return shown.stdout


def blob_id(text: str) -> str:
    """git's blob id of ``text`` (what ``git hash-object`` prints)."""
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def kernel_blob(blob: str) -> str:
    """The kernel whose git blob id is ``blob``: today's file if it is that one, else the copy in
    ``lab/.kernels/`` (``--kernels`` writes it: the GPU machine's copy of the tree has no .git),
    else git's."""
    today = kernel_text()
    if blob_id(today) == blob:
        return today
    kept = KERNELS / f"{blob}.py"
    if kept.is_file() and blob_id(kept.read_text()) == blob:
        return kept.read_text()
    shown = subprocess.run(["git", "-C", str(ROOT), "cat-file", "blob", blob], capture_output=True, text=True)
    if shown.returncode != 0:
        raise PatchError(f"kernel {blob[:12]} is not today's {KERNEL} and git has no such blob here: "
                         f"'python3 lab/timed_kernel.py --kernels' where it does writes lab/.kernels/ (carry it)")
    return shown.stdout


def header_value(variant, key: str) -> str | None:
    """The first word after ``key: `` on a line of variant ``variant``'s header (the text before
    its diff), or None."""
    for line in Path(variant).read_text().split("\n--- ", 1)[0].splitlines():
        if line.startswith(f"{key}: "):
            return line.removeprefix(f"{key}: ").split()[0]
    return None


def kernel_of(variant) -> str:
    """The blob id on variant ``variant``'s ``Kernel: <blob id>`` header line: the product kernel
    it (after its chain) applies to."""
    blob = header_value(variant, "Kernel")
    if blob is None:
        raise PatchError(f"{Path(variant).name}: no 'Kernel: <git blob id of {KERNEL}>' header line")
    return blob


def chain(variant) -> list[Path]:
    """Variant ``variant`` (a ``lab/variants/*.patch`` path) after the variants it applies on top
    of, first first (each header's ``On top of: <name>.patch`` line)."""
    variant = Path(variant)
    name = header_value(variant, "On top of")
    if name is None:
        return [variant]
    base = variant.parent / name
    if not base.is_file():
        raise PatchError(f"{variant.name}: 'On top of: {name}' names no variant")
    return [*chain(base), variant]


def variant_source(variants=(), rev: str | None = None) -> tuple[str, str]:
    """The kernel variants ``variants`` (patch paths, applied in order) on the kernel their
    ``Kernel:`` lines name (one for all), or today's kernel (``rev``'s) when there are none:
    ``(source, what it is)``."""
    bases = {kernel_of(v) for v in variants}
    if len(bases) > 1 or (bases and rev):
        raise PatchError(f"{', '.join(Path(v).name for v in variants)}: not one kernel "
                         f"({', '.join(sorted(b[:12] for b in bases))}{', --base ' + rev if rev else ''})")
    if bases:
        text = kernel_blob(*bases)
        what = KERNEL if text == kernel_text() else f"{KERNEL} (blob {next(iter(bases))[:12]})"
    else:
        text, what = kernel_text(rev), KERNEL
    for v in variants:
        text = apply(text, Path(v).read_text(), what, Path(v).name)
        what = f"{what} + {Path(v).name}"
    return text, what


def timed_source(rev: str | None = None, variants: tuple = ()) -> str:
    """The timed kernel's source: the patch applied to :func:`variant_source`, so that a variant's
    phases can be timed as today's are. A variant that moves what the timer hooks into carries the
    timer ported to it (``lab/variants/timers/<its name>``, a diff from the variant to its timed
    build); the last such port in ``variants`` replaces the patch."""
    text, what = variant_source(variants, rev)
    timer = next((PORTS / Path(v).name for v in reversed(variants) if (PORTS / Path(v).name).is_file()), PATCH)
    return apply(text, timer.read_text(), what, timer.name)


def load(variants=(), switches=()):
    """The timed kernel (on top of ``variants``, any sequence of patch paths, see
    :func:`timed_source`; ``switches``: module-level ``NAME = False`` lines set True, as
    ``wide_copy.switch_on`` sets them), imported as ``draftsmith.lowering.gluon_window_block_at_timed``
    (its relative imports resolve to the product's sibling modules); one import per chain and switches."""
    return _load(tuple(variants), tuple(switches))


@functools.lru_cache(maxsize=None)
def _load(variants: tuple, switches: tuple = ()):
    from gluon_ab import kernel_at
    from wide_copy import switch_on

    folder = Path(tempfile.mkdtemp(prefix="timed_kernel_"))
    path = folder / "timed.py"
    path.write_text(switch_on(timed_source(variants=variants), switches))
    return kernel_at(str(path))


def refresh(edited: Path) -> str:
    """The patch that turns today's kernel into ``edited``; refused while ``edited`` holds a merge's
    conflict markers (a three-way merge of the timed build onto a new kernel leaves them)."""
    marked = [l for l in edited.read_text().splitlines() if l.startswith(("<<<<<<< ", ">>>>>>> "))]
    if marked:
        raise PatchError(f"{edited}: a merge conflict is left in it ({marked[0][:40]!r})")
    return "".join(difflib.unified_diff(kernel_text().splitlines(keepends=True),
                                        edited.read_text().splitlines(keepends=True),
                                        fromfile=f"a/{KERNEL}", tofile=f"b/{KERNEL}", n=3))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="check, write or refresh lab/kernel_phases.patch")
    ap.add_argument("--write", type=Path, help="write the timed kernel's source here")
    ap.add_argument("--base", help="with --write: apply the patch to this git revision's kernel instead")
    ap.add_argument("--refresh", type=Path, help="rewrite the patch from this edited timed kernel")
    ap.add_argument("--variant", type=Path, help="with --write: write this lab/variants patch after its chain, "
                                                 "on the kernel it names, untimed")
    ap.add_argument("--kernels", action="store_true", help="write the kernels the variants name that are not "
                                                            "today's into lab/.kernels/ (from git)")
    args = ap.parse_args(argv)
    try:
        if args.kernels:
            for blob in sorted({kernel_of(v) for v in VARIANTS.glob("*.patch")}):
                if blob != blob_id(kernel_text()):
                    KERNELS.mkdir(exist_ok=True)
                    (KERNELS / f"{blob}.py").write_text(kernel_blob(blob))
                    print(f"wrote {(KERNELS / blob).relative_to(ROOT)}.py")
        elif args.variant and args.write:
            text, what = variant_source(chain(args.variant))
            args.write.write_text(text)
            print(f"{args.write}: {what}")
        elif args.refresh:
            PATCH.write_text(refresh(args.refresh))
            timed_source()
            print(f"{PATCH.relative_to(ROOT)} rewritten; it applies to {KERNEL}")
        elif args.write:
            args.write.write_text(timed_source(args.base))
            print(f"wrote {args.write}")
        else:
            timed_source()
            print(f"{PATCH.relative_to(ROOT)} applies to {KERNEL}")
    except (PatchError, OSError) as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
