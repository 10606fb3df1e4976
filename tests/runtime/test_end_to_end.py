"""Every shipped adapter, end to end: synth (tiny) -> convert -> build -> load_weights ->
one draft step, against the independent float64 implementation of reference section 1 in
``oracles.py``, which reads only the converted tensors and the flattened config (no host code)."""

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.adapters import ADAPTER_DIR
from draftsmith.framework.runtime.draft import run_draft
from support.helpers import read_checkpoint as load_converted
from support.oracles import draft_oracle

ADAPTERS = sorted(p.stem for p in ADAPTER_DIR.glob("*.yaml"))


@pytest.mark.parametrize("name", ADAPTERS)
@pytest.mark.parametrize("context", [5, 29])
def test_adapter_end_to_end(name, context, tmp_path, checkpoints):
    ck = checkpoints(name)  # the session's synthetic + converted checkpoint (conftest.py)
    seed = 1000 + context + len(name)
    dump = tmp_path / "step.safetensors"
    rep = run_draft(ck.converted, ck.target, device="cpu", context=context, seed=seed,
                    batch=2, dtype="float32", dump=dump)
    cfg, w = load_converted(ck.converted)
    tgt = load_file(ck.target / "model.safetensors")
    d = load_file(dump)
    assert d["inputs.target_hidden"].shape[0] == context
    toks, logits, conf = draft_oracle(cfg, w, tgt, d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    toks = toks.tolist()
    got = d["outputs.logits"].double()
    seen = torch.isfinite(logits)  # a DFlash 2 selector's path logits are -inf off its candidates
    assert torch.equal(torch.isfinite(got), seen), f"{name}: candidate sets differ"
    got, logits = got[seen], logits[seen]
    rel = ((got - logits).abs().max() / logits.abs().max()).item()
    assert rel < 1e-4, f"{name}: logits off by {rel:.2e} relative"
    assert d["outputs.tokens"].tolist() == toks
    assert rep.tokens[0].tolist() == toks
    if conf is not None:
        torch.testing.assert_close(d["outputs.confidence"].double(), conf, rtol=1e-4, atol=1e-6)
    assert rep.tokens.shape == (2, R.from_config(cfg).max_draft_len)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cli_draft_dtype_recorded(tmp_path, dtype, capsys):
    """``draft dtype=``: the step runs in it (the fed context is in it) and the dump records it."""
    import json
    from safetensors import safe_open
    from draftsmith.framework.cli.main import main
    args = ["draft", "adapter=zlab_dflash", "context=9", "seed=4", "format=json"]
    assert main(args + [f"dump={tmp_path / 'a.safetensors'}", f"dtype={dtype}"]) == 0
    assert json.loads(capsys.readouterr().out)["dtype"] == dtype
    with safe_open(str(tmp_path / "a.safetensors"), "pt") as f:
        assert f.metadata()["dtype"] == dtype
        assert f.get_tensor("inputs.target_hidden").dtype == getattr(torch, dtype)
    assert main(args + ["dtype=int8"]) == 2
    assert "dtype=int8: expected one of bfloat16, float16, float32" in capsys.readouterr().err  # the key table refuses it
