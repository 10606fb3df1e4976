"""lab/gluon_ab.py's revision loader: the kernel as git holds it at a revision, imported beside
today's (CPU: only the import is checked; timing needs an SM90 GPU)."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def git_ok() -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode == 0


def older_kernel_revision():
    """A commit whose kernel differs from the working tree's (None in a shallow clone)."""
    revs = subprocess.run(["git", "-C", str(ROOT), "log", "--format=%H", "-n", "5", "--", "lowering/gluon_window_block.py"],
                          capture_output=True, text=True).stdout.split()
    today = (ROOT / "lowering" / "gluon_window_block.py").read_text()
    for rev in revs:
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}~1:lowering/gluon_window_block.py"],
                               capture_output=True, text=True)
        if shown.returncode == 0 and shown.stdout != today:
            return f"{rev}~1", shown.stdout
    return None


@pytest.mark.skipif(not git_ok() or older_kernel_revision() is None, reason="no older kernel in this checkout")
def test_kernel_at_an_older_revision_is_that_revisions_source():
    import gluon_ab
    from draftsmith.lowering import gluon_window_block as today

    rev, committed = older_kernel_revision()
    module = gluon_ab.kernel_at(rev)
    assert Path(module.__file__).read_text() == committed  # that revision's text, not today's
    assert module is not today and module.__name__.startswith("draftsmith.lowering.gluon_window_block_at_")
    assert callable(module.launch) and callable(module.fits)


def test_kernel_at_a_file_is_that_files_source(tmp_path):
    import gluon_ab

    text = (ROOT / "lowering" / "gluon_window_block.py").read_text() + f"\nMARK = {len(str(tmp_path))}\n"
    path = tmp_path / "kernel_copy.py"
    path.write_text(text)
    module = gluon_ab.kernel_at(str(path))
    assert Path(module.__file__).read_text() == text and module.MARK == len(str(tmp_path))
    assert module.__name__ == "draftsmith.lowering.gluon_window_block_at_kernel_copy"


def test_unknown_revision_and_build_are_refused_in_one_line(capsys):
    import gluon_ab

    with pytest.raises(SystemExit) as e:
        gluon_ab.kernel_at("no-such-revision-0123")
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("--against no-such-revision-0123:")
    with pytest.raises(SystemExit) as e:
        gluon_ab.build_kwargs("overlap+fast")
    assert e.value.code == 2
    assert "unknown option(s) ['fast']" in capsys.readouterr().err


def test_kind_sets_the_benchs_shape_and_unknown_kinds_are_refused(capsys, monkeypatch):
    import attention as A
    import gluon_ab

    for name in ("HQ", "HKV", "D", "B", "W", "FULL"):
        monkeypatch.setattr(A, name, getattr(A, name))  # restored after the test
    hq, hkv, d, b, w, ctx, _ = A.KINDS["dflash2_minimax"]
    assert gluon_ab.use_kind("dflash2_minimax") == ctx
    assert (A.HQ, A.HKV, A.D, A.B, A.W, A.FULL) == (hq, hkv, d, b, w, False)
    hq, hkv, d, b, w, ctx, _ = A.KINDS["dspark_full"]
    assert w is None and gluon_ab.use_kind("dspark_full") == ctx
    assert (A.HQ, A.HKV, A.B, A.W, A.FULL) == (hq, hkv, b, ctx + b, True)  # a window no key is outside of
    with pytest.raises(SystemExit) as e:
        gluon_ab.use_kind("no_such_kind")
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("--kind no_such_kind: unknown")
