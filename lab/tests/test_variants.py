"""Every kernel variant under ``lab/variants/`` applies, after its chain (a header line ``On top
of: <name>.patch``), to the product kernel its ``Kernel: <git blob id>`` line names (CPU; a stale
patch would only be found on the GPU machine, in device time), and the patched file is Python."""

import subprocess
from pathlib import Path

import pytest

import timed_kernel
from timed_kernel import chain, kernel_of, variant_source

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "lab" / "variants").glob("*.patch"))


@pytest.mark.parametrize("variant", PATCHES, ids=lambda p: p.name)
def test_variant_applies_to_the_kernel_it_names(variant):
    variants = chain(variant)
    assert len({kernel_of(v) for v in variants}) == 1, f"{variant.name}: its chain names more than one kernel"
    text, _ = variant_source(variants)
    compile(text, variant.name, "exec")  # the patched kernel file is Python


def test_every_variant_says_whether_it_was_measured():
    for variant in PATCHES:
        head = variant.read_text().splitlines()[0]
        assert head.startswith(("MEASURED", "NOT MEASURED")), f"{variant.name}: first line {head!r}"


def test_a_kernel_is_found_by_its_blob_id_without_git(tmp_path, monkeypatch):
    """The GPU machine's tree has no .git: a variant's kernel comes from lab/.kernels/ there, checked
    against its id (``git hash-object``'s), and a missing one is refused in one line."""
    old = timed_kernel.kernel_of(PATCHES[0])
    text = subprocess.run(["git", "-C", str(ROOT), "cat-file", "blob", old], capture_output=True, text=True).stdout
    assert text and subprocess.run(["git", "hash-object", "--stdin"], input=text, capture_output=True,
                                   text=True).stdout.strip() == timed_kernel.blob_id(text) == old
    monkeypatch.setattr(timed_kernel, "ROOT", tmp_path)  # no .git here: git cat-file fails
    (tmp_path / timed_kernel.KERNEL).parent.mkdir(parents=True)
    (tmp_path / timed_kernel.KERNEL).write_text("# today's kernel\n")
    monkeypatch.setattr(timed_kernel, "KERNELS", tmp_path / "kernels")
    with pytest.raises(timed_kernel.PatchError) as e:
        timed_kernel.kernel_blob(old)
    assert "\n" not in str(e.value) and "--kernels" in str(e.value)
    timed_kernel.KERNELS.mkdir()
    (timed_kernel.KERNELS / f"{old}.py").write_text(text + "# edited\n")  # not that blob: refused
    with pytest.raises(timed_kernel.PatchError):
        timed_kernel.kernel_blob(old)
    (timed_kernel.KERNELS / f"{old}.py").write_text(text)
    assert timed_kernel.kernel_blob(old) == text
