"""lab/ptx_same.py: a kernel file that differs from today's only in comments compiles to the same
PTX; one that changes an instruction does not (triton 3.6's Gluon compiler, no GPU)."""

from pathlib import Path

import pytest

from draftsmith.lowering import gluon_window_block as gwb

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "lowering" / "gluon_window_block.py"
BUILDS = [dict(overlap=True), dict(d=256, overlap=False, num_splits=3)]


@pytest.mark.skipif(not gwb.available(), reason="Gluon's Hopper API (triton 3.6) is not installed here")
def test_comments_keep_the_ptx_and_an_instruction_changes_it(tmp_path):
    import ptx_same
    from gluon_ab import kernel_at

    text = KERNEL.read_text()
    commented = tmp_path / "commented.py"
    commented.write_text("# a comment line that moves every line below\n" + text.replace("    # ", "    # (moved) "))
    assert ptx_same.differing(gwb, kernel_at(str(commented)), BUILDS) == []
    softmax = "alpha = gl.exp2(m_i - m_new)\n"
    assert text.count(softmax) == 2
    changed = tmp_path / "changed.py"
    changed.write_text(text.replace(softmax, "alpha = gl.exp2(m_i - m_new) * 0.5\n"))
    assert ptx_same.differing(gwb, kernel_at(str(changed)), BUILDS) == BUILDS


def test_bad_arguments_are_refused(capsys):
    import ptx_same

    assert ptx_same.main([]) == 2
    assert "usage" in capsys.readouterr().err
