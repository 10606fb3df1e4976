"""The planted-defect catalogue (tests/planted/defects.yaml) still applies to this checkout.

Each entry's ``old`` text must occur exactly once in its file and its test selection must name
existing files, or ``tests/planted/plant.py`` cannot plant it (issue 48, point 4: every planted
defect is caught before and after the suite is reshaped). Seconds only: nothing is planted or run.
"""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("planted_plant", ROOT / "tests" / "planted" / "plant.py")
plant = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = plant  # dataclasses look their module up
_spec.loader.exec_module(plant)

DEFECTS = plant.load_catalogue()


def test_catalogue_covers_every_stage_and_upstream():
    assert len(DEFECTS) >= 40
    assert {d.stage for d in DEFECTS} == set(plant.STAGES)
    assert {"TensorRT-LLM", "z-lab", "speculators", "vLLM", "SGLang", "llama.cpp"} <= {d.upstream for d in DEFECTS}


def test_every_defect_applies():
    stale = [f"{d.id}: {why}" for d in DEFECTS if (why := plant.applies(d, ROOT))]
    assert not stale, "\n".join(stale)


def test_check_mode_refuses_a_stale_entry(tmp_path, capsys):
    """--check reports an entry whose ``old`` no longer matches (and one matching twice)."""
    src = (ROOT / "tests" / "planted" / "defects.yaml").read_text()
    bad = tmp_path / "defects.yaml"
    bad.write_text(src.replace('old: "ok &= k <= p"', 'old: "ok &= k <= p  # gone"', 1)
                   .replace('old: "return None if window is None else window - 1"', 'old: "if"', 1))
    assert plant.main(["--catalogue", str(bad), "--check"]) == 1
    out = capsys.readouterr().out
    assert "mask-causal-excludes-self: lowering/base.py: old text found 0 times" in out
    assert "mask-window-off-by-one: lowering/base.py: old text found" in out
    assert plant.main(["--check"]) == 0
