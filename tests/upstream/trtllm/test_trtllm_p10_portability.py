"""Point 10 (portability): the emitted package carries the resolved drafter as data -- no absolute
adapter path, no adapter sha256 -- and keeps working when the adapter file it came from changes
or moves (CONTRACT.md R10)."""

import pytest
import hashlib
import shutil

from harness import REPO, assert_matches_oracle, cli


def test_package_names_no_path_or_hash_of_this_machine(case):
    pkg = case.package()
    yaml_path = REPO / "adapters" / f"{case.adapter}.yaml"
    sha = hashlib.sha256(yaml_path.read_bytes()).hexdigest()
    for f in pkg.rglob("*.py"):
        text = f.read_text()
        assert str(REPO) not in text, f"{f.name} names this checkout ({REPO})"
        assert sha not in text and sha[:16] not in text, f"{f.name} pins the adapter file's sha256"


@pytest.mark.builds_drafter
def test_package_survives_a_changed_and_moved_adapter_file(kind_case, tmp_path):
    """One adapter per drafter kind (conftest ``kind_case``): the code under test is the same in every package."""
    case = kind_case
    adir = tmp_path / "adapters"
    adir.mkdir()
    src = REPO / "adapters" / f"{case.adapter}.yaml"
    shutil.copy(src, adir / src.name)
    out = tmp_path / "emitted"
    r = cli("emit", f"adapter={case.adapter}", "target=trtllm", f"out={out}", f"adapter_dir={adir}",
            f"config={case.converted}")
    assert r.returncode == 0, (r.stderr or r.stdout).strip()[-600:]
    pkg = next(p for p in out.iterdir() if (p / "__init__.py").is_file())
    (adir / src.name).write_text(src.read_text() + "\n# edited after emission\n")
    moved = tmp_path / "elsewhere" / pkg.name
    shutil.copytree(pkg, moved)
    shutil.rmtree(adir)
    res = case.drive("serve", package=moved)
    assert res["import"] == {"ok": True}, res["import"].get("error")
    assert_matches_oracle(case, res["backends"]["VANILLA"], "moved package, adapter file changed/removed")
