"""lab/wide_copy.py (CPU): the wide build switched on in a copy of wide-ring.patch's kernel, and
nothing else changed; an unknown switch is refused."""

from pathlib import Path

import pytest

from timed_kernel import variant_source
from wide_copy import wide_on

ROOT = Path(__file__).resolve().parents[2]
WIDE = ROOT / "lab" / "variants" / "wide-ring.patch"


@pytest.fixture(scope="module")
def wide_text():
    return variant_source([WIDE])[0]


def test_switches_and_default_only(wide_text):
    out = wide_on(wide_text, ["WIDE_KV", "WIDE_Q_SMEM"])
    changed = [(a, b) for a, b in zip(wide_text.splitlines(), out.splitlines()) if a != b]
    assert len(out.splitlines()) == len(wide_text.splitlines())
    assert sorted(b.split("#")[0].strip() for _, b in changed) == [
        "WIDE_KV = True", "WIDE_Q_SMEM = True", "return consumers == 2 and d == 128"]
    compile(out, "wide.py", "exec")


def test_unknown_switch_is_refused(wide_text):
    with pytest.raises(ValueError, match="WIDE_NOTHING"):
        wide_on(wide_text, ["WIDE_NOTHING"])
