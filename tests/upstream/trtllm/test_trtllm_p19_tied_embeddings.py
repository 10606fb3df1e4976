"""Issue 34 point 5: with ``tie_word_embeddings: true`` the emitted backbone passes TensorRT-LLM's own
tie block (excerpt of ``DecoderModelForCausalLM.__init__``: ``lm_head`` and ``embed_tokens`` share TP
size and mode, then the weight), at TP 1, TP 4 and under attention DP (tie_check.py). One adapter per
drafter kind (``kind_case``): the tie block sees the same embedding and head modules in every package of a
kind."""

import json

import pytest

from support.forkserver import run_script
import excerpts
from harness import HERE


@pytest.mark.parametrize("where", ["tp1", "tp4", "tp4-attention_dp"])
def test_tied_embeddings_build_as_tensorrt_llm_builds_them(kind_case, where):
    case = kind_case
    if "tie" not in case.runs:
        src = excerpts.require()
        args = {"package_dir": str(case.package()), "checkpoint": str(case.converted),
                "result": str(case.root / "tie.json")}
        (case.root / "tie_args.json").write_text(json.dumps(args))
        env = {**__import__("os").environ, excerpts.ENV: str(src)}
        p = run_script(HERE / "tie_check.py", case.root / "tie_args.json", timeout=300, env=env)
        res = json.loads((case.root / "tie.json").read_text())
        assert "fatal" not in res, f"{case.adapter}: {res['fatal']}\n{res['trace']}\n{p.stderr[-800:]}"
        case.runs["tie"] = res
    out = case.runs["tie"][where]
    assert "error" not in out, f"{case.adapter} {where}: TensorRT-LLM's tie block refuses: {out['error']}\n{out['trace']}"
    assert out["tied"], f"{case.adapter} {where}: lm_head does not share embed_tokens' weight"
