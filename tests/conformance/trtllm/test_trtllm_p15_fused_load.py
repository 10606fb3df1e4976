"""Issue 34 point 3: the emitted backbone's fused q/k/v (and any gate/up it builds itself) load
through TensorRT-LLM's fused weight modes: the excerpt's fused branch of ``load_single_module``
hands a fused module one dict per ``params_map`` entry, and ``LinearMethodBase.load_weights``
dispatches on the module's ``weights_loading_config.weight_mode``; the vanilla helper asserts one
dict (fused_load.py)."""

import json
import subprocess
import sys

import excerpts
from harness import HERE


def test_fused_modules_load_through_trtllms_loader(case):
    src = excerpts.require()
    args = {"src": str(src), "package_dir": str(case.package()), "checkpoint": str(case.converted),
            "result": str(case.root / "fused_load.json")}
    (case.root / "fused_load_args.json").write_text(json.dumps(args))
    p = subprocess.run([sys.executable, str(HERE / "fused_load.py"), str(case.root / "fused_load_args.json")],
                       capture_output=True, text=True, timeout=300)
    res = json.loads((case.root / "fused_load.json").read_text())
    assert "fatal" not in res, f"{case.adapter}: {res.get('fatal')}\n{res.get('trace')}\n{p.stderr[-1500:]}"
    mods = res["modules"]
    assert any(n.endswith("qkv_proj") for n in mods), f"{case.adapter}: no qkv_proj in the emitted backbone"
    bad = [f"{n} (built by {r['built_by']}, weight_mode {r['mode']}, handed {r['dicts']} dicts): {r['error'] or 'AssertionError'}"
           for n, r in mods.items() if r["emitted"] and "error" in r]
    assert not bad, f"{case.adapter}: " + "; ".join(bad)
