"""Point 5 (DFlash as DFlash): every adapter emits from the CLI; DFlash drafters as
``decoding_type: DFlash`` on a DFlash base class, DSpark ones as DSpark, so the worker reads the
right block slots (CONTRACT.md R5)."""

from support.cli import cli_subprocess


def test_each_kind_emits_with_its_decoding_type(kind_case):
    case = kind_case  # one adapter per drafter kind: the same emitted code for every adapter of a kind
    pkg = case.package()
    res = case.serve()
    want = "DFlash" if case.is_dflash else "DSpark"
    assert res["snippet"]["decoding_type"] == want, (
        f"{case.adapter}: snippet decoding_type {res['snippet']['decoding_type']}, want {want}")
    out = res["backends"]["VANILLA"]
    assert "build" not in out, f"{case.adapter}: {out['build']['error']}"
    base = "modeling_dflash.DFlashForCausalLM" if want == "DFlash" else "modeling_dspark.GQADSparkForCausalLM"
    assert any(m.endswith(base) for m in out["drafter_mro"]), (case.adapter, out["drafter_mro"])
    if want == "DFlash":
        assert not any(m.endswith("GQADSparkForCausalLM") for m in out["drafter_mro"]), out["drafter_mro"]
    assert pkg.is_dir()


def test_worker_reads_the_slots_the_drafter_was_trained_for(kind_case):
    case = kind_case  # one adapter per drafter kind: the same emitted code for every adapter of a kind
    out = case.serve()["backends"]["VANILLA"]
    assert "slots" in out, f"{case.adapter}: no draft step ran: {out.get('build') or out.get('load') or out.get('decode')}"
    k = case.config["draftsmith"]["max_draft_len"]
    first = 0 if case.sample_from_anchor else 1
    assert out["slots"] == list(range(first, first + k)), (
        f"{case.adapter}: worker read block slots {out['slots']}; sample_from_anchor="
        f"{case.sample_from_anchor} means slots {first}..{first + k - 1}")


def test_emit_accepts_backbone_on_the_command_line(tmp_path):
    # a process of its own in which nothing of tensorrt_llm is imported: emit must name the backbone without importing it
    r = cli_subprocess(["emit", "adapter=zlab_dflash", "target=trtllm", f"out={tmp_path}",
                        "backbone=tensorrt_llm._torch.models.modeling_qwen3:Qwen3ForCausalLM"], timeout=300)
    assert r.returncode == 0, (r.stderr or r.stdout).strip()[-600:]
