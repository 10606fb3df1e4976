"""Point 7 (version floor): importing the package under an older TensorRT-LLM raises one line
naming the supported minimum; under the pinned minimum it imports (CONTRACT.md R7)."""

from harness import OLD_VERSION, PINNED_MINIMUM_VERSION, one_line


def test_older_tensorrt_llm_is_refused_in_one_line_naming_the_minimum(kind_case):
    """One adapter per drafter kind (conftest ``kind_case``): the code under test is the same in every package."""
    case = kind_case
    res = case.drive("import", env={"DS_STANDIN_TRTLLM_VERSION": OLD_VERSION})
    assert res["trtllm_version"] == OLD_VERSION
    imp = res["import"]
    assert "error" in imp, f"{case.adapter}: the package imported under TensorRT-LLM {OLD_VERSION}"
    assert PINNED_MINIMUM_VERSION in imp["message"] and one_line(imp["message"]), (
        f"{case.adapter}: under {OLD_VERSION} the import must fail in one line naming "
        f"{PINNED_MINIMUM_VERSION}; got {imp['error']}")


def test_pinned_minimum_imports(case):
    res = case.serve()  # the serving process imports the package under the pinned minimum first
    assert res["trtllm_version"] == PINNED_MINIMUM_VERSION
    assert res["import"] == {"ok": True}, f"{case.adapter}: {res['import'].get('error')}"
