"""Issue 45 point 1: the emitted backbone's fused ``qkv_proj`` / ``gate_up_proj`` load through TensorRT-LLM's
own loader as its DFlash loader calls it. ``DFlashForCausalLM.load_weights`` (amukkara modeling_dflash.py @
d70a2287) always hands the backbone ``allow_partial_loading=True``; ``_load_weights_impl`` passes it to the
fused modules, whose helpers (linear.py) then require ``fused_weight_shard_indices_mapping`` ("Fused weight
shard indices mapping is required in partial loading"). A fresh process installs the verbatim ``deep/`` shim
(verbatim_load.py), imports the package, builds the drafter through the registered builder at TP 1 and loads
the converted checkpoint; every tensor must equal the checkpoint's (shards.py). TP 2/4/8 and attention DP:
test_trtllm_p17_tensor_parallel.py."""

import json

import torch

from support.forkserver import run_script
import excerpts
from harness import HERE
from shards import rank_slices


def test_fused_modules_load_through_trtllms_loader(case):
    excerpts.require()
    args = {"package_dir": str(case.package()), "checkpoint": str(case.converted),
            "params": str(case.root / "verbatim_tp1.pt"), "result": str(case.root / "verbatim_tp1.json"),
            "mapping": {"world_size": 1, "rank": 0, "tp_size": 1}}
    (case.root / "verbatim_tp1_args.json").write_text(json.dumps(args))
    p = run_script(HERE / "verbatim_load.py", case.root / "verbatim_tp1_args.json", timeout=300)
    res = json.loads((case.root / "verbatim_tp1.json").read_text())
    assert "fatal" not in res, f"{case.adapter}: {res.get('fatal')}\n{res.get('trace')}\n{p.stderr[-1500:]}"
    assert "load" not in res, f"{case.adapter}: TensorRT-LLM's loader refused: {res['load']['error']}\n{res['load']['trace']}"
    got = {k: v for k, v in torch.load(args["params"]).items() if "embed_tokens" not in k and "lm_head" not in k}
    want = rank_slices(case.weights, case.config, 1, 0, False)
    assert sorted(got) == sorted(want), f"{case.adapter}: loaded {sorted(got)}, the checkpoint has {sorted(want)}"
    bad = [k for k in want if got[k].dtype != want[k].dtype or not torch.equal(got[k], want[k])]
    assert not bad, f"{case.adapter}: differs from the checkpoint after loading: {bad}"
