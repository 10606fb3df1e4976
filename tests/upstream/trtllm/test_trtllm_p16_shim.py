"""Issue 34 point 1: the emitted package, imported with the shim ``tensorrt_llm`` on ``sys.path``,
gets TensorRT-LLM's REAL excerpted ``DFlashForCausalLM`` / ``GQADSparkForCausalLM`` (shim_drive.py);
the drafter builds through the real ``__init__`` on the emitted backbone, in the serving process
(the package's builder) and in a worker that never imported it (the excerpt's builder), resolves
the trained masks, and keeps TensorRT-LLM's TRTLLM refusal for non-causal windows. One adapter per
drafter kind (``kind_case``): the class, the builder and the backend refusal are the same code for every
package of a kind (the representatives hold both a non-causal window and none); every adapter's masks as
a worker resolves them are test_trtllm_p02_processes.py's."""

import json

import pytest
import torch

from support.forkserver import run_script
import excerpts
from harness import CONTEXT, HERE, expected_mask, mask_matrix


def shim_drive(case, mode, arch_modules=None):
    key = f"shim_{mode}"
    if key not in case.runs:
        src = excerpts.require()
        args = {"mode": mode, "package_dir": str(case.package()), "checkpoint": str(case.converted),
                "arch_modules": arch_modules, "result": str(case.root / f"{key}.json")}
        (case.root / f"{key}_args.json").write_text(json.dumps(args))
        env = {**__import__("os").environ, excerpts.ENV: str(src)}
        p = run_script(HERE / "shim_drive.py", case.root / f"{key}_args.json", timeout=300, env=env)
        res = json.loads((case.root / f"{key}.json").read_text())
        assert "fatal" not in res, f"{case.adapter} {mode}: {res['fatal']['error']}\n{res['fatal']['trace']}\n{p.stderr[-1000:]}"
        case.runs[key] = res
    return case.runs[key]


def runs(case):
    serve = shim_drive(case, "serve")
    return {"serve": serve, "worker": shim_drive(case, "worker", serve["exported_arch_modules"])}


@pytest.mark.builds_drafter
@pytest.mark.parametrize("mode", ["serve", "worker"])
def test_emitted_drafter_builds_on_the_excerpted_class(kind_case, mode):
    case = kind_case
    res = runs(case)[mode]
    assert res["package_imported_before_build"] is (mode == "serve")
    out = res["backends"]["VANILLA"]
    assert "build" not in out, f"{case.adapter} {mode}: {out['build']['error']}\n{out['build']['trace']}"
    assert out["is_excerpt_class"], f"{case.adapter} {mode}: {out['class']} is not TensorRT-LLM's excerpted class"
    assert out["backbone"].endswith("DraftsmithBackbone"), out["backbone"]
    b = case.config["dflash_config"]["block_size"]
    for i, layer in enumerate(case.layers):
        causal, (left, right) = out["resolved"][i]
        assert torch.equal(mask_matrix(causal, left, right, CONTEXT, b), expected_mask(layer, CONTEXT, b)), (
            f"{case.adapter} {mode} ({out['class']}): layer {i} resolves to causal={causal} ({left}, {right}); "
            f"trained causal={layer['causal']} window={layer['window']}")
    assert out["validate"] == {"returned": "None"}, f"{case.adapter} {mode}: {out['validate']}"


@pytest.mark.builds_drafter
@pytest.mark.parametrize("mode", ["serve", "worker"])
def test_trtllm_backend_refusal_is_tensorrt_llms(kind_case, mode):
    case = kind_case
    out = runs(case)[mode]["backends"]["TRTLLM"]
    assert "build" not in out, f"{case.adapter} {mode}: {out['build']['error']}"
    noncausal_window = any(l["window"] is not None and not l["causal"] for l in case.layers)
    if noncausal_window:
        assert "error" in out["validate"] and "does not support non-causal sliding-window" in out["validate"]["error"], \
            f"{case.adapter} {mode}: {out['validate']}"
    else:
        assert out["validate"] == {"returned": "None"}, f"{case.adapter} {mode}: {out['validate']}"
