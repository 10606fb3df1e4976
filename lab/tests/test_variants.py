"""Every kernel variant under ``lab/variants/`` still applies to today's product kernel (CPU; a
stale patch would only be found on the GPU machine, in device time); a variant whose header has a
line ``On top of: <name>.patch`` applies after that one."""

import shutil
import subprocess
from pathlib import Path

import pytest

from timed_kernel import chain

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "lowering" / "gluon_window_block.py"
PATCHES = sorted((ROOT / "lab" / "variants").glob("*.patch"))


@pytest.mark.skipif(shutil.which("patch") is None, reason="no patch(1) here")
@pytest.mark.parametrize("variant", PATCHES, ids=lambda p: p.name)
def test_variant_applies_to_todays_kernel(variant, tmp_path):
    src = KERNEL
    for n, patch in enumerate(chain(variant)):
        out = tmp_path / f"ab_variant{n}.py"
        done = subprocess.run(["patch", "-o", str(out), str(src), str(patch)], capture_output=True, text=True)
        assert done.returncode == 0 and "offset" not in done.stdout and "fuzz" not in done.stdout, done.stdout + done.stderr
        src = out
    compile(out.read_text(), str(out), "exec")  # the patched kernel file is Python


def test_every_variant_says_whether_it_was_measured():
    for variant in PATCHES:
        head = variant.read_text().splitlines()[0]
        assert head.startswith(("MEASURED", "NOT MEASURED")), f"{variant.name}: first line {head!r}"
