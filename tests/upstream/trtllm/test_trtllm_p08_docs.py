"""Point 8 (docs): the serving docs name only attention_backend values the pinned version accepts
and say that ``--custom_module_dirs`` (``trtllm-serve serve`` / ``trtllm-bench``) takes the package
directory (CONTRACT.md R8)."""

import re

from harness import REPO

DOCS = [REPO / "docs" / "serving-on-trtllm.md", REPO / "docs" / "trtllm-interface.md"]
VALID = {"AUTO", "VANILLA", "TRTLLM", "CUTEDSL"}


def test_docs_name_only_valid_attention_backends():
    bad = []
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            if "attention_backend" not in line:
                continue
            named = set(re.findall(r"`([A-Z][A-Z0-9]+)`", line)) | set(re.findall(r"attention_backend[=:]\s*`?([A-Z0-9]+)", line))
            bad += [f"{doc.name}: {v}: {line.strip()[:120]}" for v in named - VALID if v in {"FA4", "XQA", "FLASHINFER"}]
    assert not bad, "docs name attention_backend values the pinned version refuses:\n" + "\n".join(bad)


def test_docs_say_custom_module_dirs_takes_the_package_directory():
    text = (REPO / "docs" / "serving-on-trtllm.md").read_text()
    lines = [l for l in text.splitlines() if "--custom_module_dirs" in l]
    assert any("trtllm-serve" in l for l in lines) and any("trtllm-bench" in text for _ in [0]), lines
    assert any(re.search(r"package dir|package folder|draftsmith_\w+/?`", l) for l in lines), (
        "serving-on-trtllm.md must show --custom_module_dirs with the emitted *package* directory; "
        f"lines: {lines}")
    assert not any("exact CLI" in l or "comments mention" in l for l in lines), lines
