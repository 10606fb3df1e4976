"""``lab/gpu_session.sh OUT pack``: the device returns at most 8 files a call, so ``pack`` puts every
file under OUT (any depth) but the still-open ``smi.csv`` into one ``out.tar.xz`` and removes them."""

from __future__ import annotations

import random
import subprocess
import tarfile
from pathlib import Path

SESSION = Path(__file__).resolve().parents[1] / "gpu_session.sh"


def test_pack_leaves_one_archive_holding_every_file(tmp_path):
    out = tmp_path / "out"
    files = {f"kind_{i}.jsonl": str(random.random()) for i in range(11)}
    files["a/b/deep.txt"] = str(random.random())
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
