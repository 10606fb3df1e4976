"""docs/serving-on-trtllm.md agrees with the code (issue 47 point 5, issue 45 point 4): its lowering
list (section 4) is the lowering registry, each name once; its adapters per decoding type
(section 3) are what ``emit`` derives for every ``adapters/*.yaml``; its worker table names the
``emit`` key that carries the package into TensorRT-LLM's workers."""

import re

from harness import ADAPTERS, REPO

DOC = REPO / "docs" / "serving-on-trtllm.md"


def _section(title_start: str) -> str:
    text = DOC.read_text()
    m = re.search(rf"^## {re.escape(title_start)}.*?(?=^## )", text, re.S | re.M)
    assert m, f"{DOC.name}: no section '## {title_start}'"
    return m.group(0)


def test_the_lowering_list_is_the_registry_each_name_once():
    from draftsmith.lowering.base import LOWERINGS

    listed = re.findall(r"^- `([a-z0-9_]+)`", _section("4."), re.M)
    assert sorted(listed) == sorted(set(listed)), f"a lowering listed twice: {listed}"
    assert set(listed) == set(LOWERINGS), f"listed {sorted(listed)}, registered {sorted(LOWERINGS)}"


def test_the_adapters_per_decoding_type_are_what_emit_derives():
    from draftsmith.framework.compile.decoding import decoding_type
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.compile.resolve import resolve
    from draftsmith.framework.convert.synth import source_config

    want: dict = {}
    for name in ADAPTERS:
        a = load_adapter(name)
        want.setdefault(decoding_type(resolve(a, source_config(a, "tiny"))), set()).add(name)
    section = _section("3.")
    got = {m.group(1): {x.strip() for x in m.group(2).split(",")}
           for m in re.finditer(r"^- (DFlash|DSpark): (.+)$", section, re.M)}
    assert got == want, f"docs list {got}, emit derives {want}"


def test_the_worker_table_names_target_architecture():
    section = _section("2.")
    assert "### 2b. What runs where" in section
    assert "target_architecture=" in section and "| TP 1 worker |" in section and "TP > 1 worker" in section
    assert "a worker that never imported it builds tensorrt-llm's own class;" not in DOC.read_text().lower()
