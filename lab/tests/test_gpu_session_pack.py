"""``lab/gpu_session.sh OUT pack``: the device returns at most 8 files a call, so ``pack`` puts every
file under OUT (any depth) but the still-open ``smi.csv`` into one ``out.tar.xz`` and removes them, only
where the session found OUT empty (its record), never a folder that held other files."""

from __future__ import annotations

import random
import subprocess
import tarfile
from pathlib import Path

SESSION = Path(__file__).resolve().parents[1] / "gpu_session.sh"


def test_pack_leaves_one_archive_holding_every_file(tmp_path):
    out = tmp_path / "out"
    subprocess.run(["bash", str(SESSION), str(out)], check=True, capture_output=True)  # the session's start
    files = {f"kind_{i}.jsonl": str(random.random()) for i in range(11)}
    files["a/b/deep.txt"] = str(random.random())
    files["name with spaces.txt"] = str(random.random())
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    (out / "smi.csv").write_text("timestamp\n")
    subprocess.run(["bash", str(SESSION), str(out), "pack"], check=True, capture_output=True)
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert left == ["out.tar.xz", "smi.csv"]
    with tarfile.open(out / "out.tar.xz") as tar:
        got = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    assert got == files


def test_pack_leaves_a_folder_that_held_files_before_the_session_alone(tmp_path):
    out = tmp_path / "home"
    out.mkdir()
    (out / "notes.txt").write_text("not the session's")
    (out / "a b").write_text("nor this")
    done = subprocess.run(["bash", str(SESSION), str(out), "pack"], check=True, capture_output=True, text=True)
    assert "not packed" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["a b", "notes.txt"]
