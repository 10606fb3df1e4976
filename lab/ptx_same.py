"""Whether two versions of the Gluon kernel compile to the same PTX for the builds ``launch``
picks (no GPU: triton 3.6's Gluon compiler, ``gluon_compile.py``).

A change meant to leave the kernel as it is (a docstring, names, a build removed) is checked
by this before the GPU tests: the PTX of each build, without its debug lines (``.loc``,
``.file``, the ``.debug_*`` sections: they hold source line numbers), must be the same.

Usage: ``PYTHONPATH=. python3 lab/ptx_same.py OLD [NEW]``: git revisions or kernel ``.py``
files (``gluon_ab.kernel_at``); NEW defaults to the working tree's kernel. Exit 0 if every
build's PTX is the same, 1 if one differs, 2 on bad input.
"""

import re
import sys

import _paths  # noqa: F401  (bench/ on sys.path)
from draftsmith.lowering import gluon_window_block as today
from gluon_ab import kernel_at
from gluon_compile import compile_for_sm90

# The builds launch() picks (default_overlap, default_pingpong). The phase timer's build is the
# lab's (timed_kernel.py), not the product's.
BUILDS = [
    dict(overlap=True), dict(overlap=False), dict(d=64, overlap=False), dict(d=256, overlap=False),
    dict(d=256, overlap=False, page=16), dict(consumers=1, overlap=True), dict(page=32, overlap=True),
    dict(causal=True, windowed=False, overlap=True), dict(num_splits=4, overlap=False),
    dict(d=256, overlap=False, pingpong=True), dict(page=32775, one_page=True, overlap=True),
    dict(page=32775, one_page=True, consumers=1, overlap=False, num_splits=4),
]


def normalized(ptx: str) -> str:
    """The PTX without what depends on source lines only."""
    ptx = ptx.split("\t.section\t.debug")[0]
    return "\n".join(line for line in ptx.splitlines()
                     if not line.lstrip().startswith((".loc", ".file")) and not re.match(r"^\$L__tmp\d+:", line.strip()))


def differing(old, new, builds=BUILDS) -> list[dict]:
    """The builds whose normalized PTX differs between kernel modules ``old`` and ``new``."""
    return [b for b in builds if normalized(compile_for_sm90(**b, kernel=old)["ptx"])
            != normalized(compile_for_sm90(**b, kernel=new)["ptx"])]


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print("usage: ptx_same.py OLD [NEW] (git revisions or kernel .py files)", file=sys.stderr)
        return 2
    if not today.available():
        print("needs Gluon's Hopper API (triton 3.6)", file=sys.stderr)
        return 2
    old = kernel_at(argv[0])
    new = kernel_at(argv[1]) if len(argv) == 2 else today
    bad = differing(old, new)
    for b in BUILDS:
        print(("DIFFERENT " if b in bad else "same      ") + " ".join(f"{k}={v}" for k, v in b.items()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
