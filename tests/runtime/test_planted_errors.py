"""Synthetic weights expose conversion errors (issue 22, point 9): each known error class is
planted into a correct conversion's record (what a wrong reader or spec would have written)
and the end-to-end comparison (the host's draft step on the planted conversion against the
float64 oracle of ``oracles.py`` on the true one) must see it; unplanted, they agree.

The target's hidden states are a seeded stack of every target layer's output; each side
feeds its drafter the rows its own ``target_layer_ids`` select, so a layer-id offset is an
input difference, as it is in serving."""

import copy
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.framework.convert.execute import convert
from draftsmith.framework.convert.synth import synthesize
from draftsmith.framework.runtime import get_host
from draftsmith.framework.runtime.loading import build_drafter
from support.helpers import read_checkpoint
from support.oracles import draft_oracle
from support.numerics import rel  # noqa: E402

CONTEXT = 29


def _plant(kind: str, cfg: dict) -> None:
    """One error of class ``kind`` in the ``draftsmith`` record of a converted config (in place),
    and in the keys beside it that say the same (a wrong conversion writes both; a file whose keys
    disagree with its record is refused on reading, tests/compile/test_read_back.py)."""
    rec = cfg["draftsmith"]
    if kind == "rope_base":  # the family default a reader of the wrong key falls back to
        rec["rope"]["theta"] = cfg["rope_theta"] = 10000.0 if rec["rope"]["theta"] != 10000.0 else 1e6
    elif kind == "norm_style":  # a Gemma norm run plainly (a fold rule that matched nothing)
        k = next(k for k, v in rec["norms"].items() if v == "gemma" and k == "input_layernorm")
        rec["norms"][k] = "plain"
    elif kind == "causal_layer":
        rec["layers"][0]["mask"]["causal"] = not rec["layers"][0]["mask"]["causal"]
    elif kind == "window_off_by_one":
        rec["layers"][0]["mask"]["window"] += 1
        widest = max(layer["mask"]["window"] or 0 for layer in rec["layers"])
        cfg["sliding_window"] = widest  # the HF spelling holds the widest window
        if "swa_window_size" in cfg.get("dflash_config", {}):
            cfg["dflash_config"]["swa_window_size"] = widest
    elif kind == "layer_id_offset":  # input/output convention confused: every id one off
        ids = [i - 1 for i in rec["target_layer_ids"]]
        rec["target_layer_ids"] = ids
        cfg["dflash_config"]["target_layer_ids"] = list(ids)
        if "dspark_target_layer_ids" in cfg:  # DSpark's fallback for TensorRT-LLM
            cfg["dspark_target_layer_ids"] = list(ids)
    else:
        raise AssertionError(kind)


def _host_logits(ckpt, target, stack, anchor):
    model, _ = build_drafter(get_host("torch").model_cls, ckpt, target, torch.device("cpu"), torch.float32, None)
    hidden = torch.cat([stack[i] for i in model.cfg.target_layer_ids], -1).float()
    cache = model.make_cache(1, page_size=16, max_context=CONTEXT)
    cache.advance(0, 0)
    model.append_context(cache, hidden, seq=0)
    return model.draft(torch.tensor([anchor]), cache).logits[0].double()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """minimax_dspark (Gemma norms, non-causal windows of 8, Markov head), converted once."""
    d = tmp_path_factory.mktemp("planted")
    a = load_adapter("minimax_dspark")
    synthesize(a, "tiny", d / "S", seed=11)
    convert(a, d / "S", d / "T", progress=False)
    cfg, w = read_checkpoint(d / "T")
    tgt = load_file(d / "S" / "target" / "model.safetensors")
    r = R.from_config(cfg)
    g = torch.Generator().manual_seed(12)
    stack = torch.randn(max(r.target_layer_ids) + 2, CONTEXT, r.dims.target_hidden, generator=g, dtype=torch.float64)
    anchor = 17
    hidden = torch.cat([stack[i] for i in r.target_layer_ids], -1)
    _, want, _ = draft_oracle(cfg, w, tgt, hidden, anchor)
    assert r.layers[0].mask.window is not None and r.layers[0].mask.window < CONTEXT  # the window matters
    return d, want, stack, anchor


def test_unplanted_agrees(converted):
    d, want, stack, anchor = converted
    got = _host_logits(d / "T", d / "S" / "target", stack, anchor)
    assert rel(got, want) < 1e-4


@pytest.mark.parametrize("kind", ["rope_base", "norm_style", "causal_layer", "window_off_by_one", "layer_id_offset"])
def test_planted_error_caught(converted, kind, tmp_path):
    d, want, stack, anchor = converted
    bad = tmp_path / "T"
    shutil.copytree(d / "T", bad)
    cfg = json.loads((bad / "config.json").read_text())
    before = copy.deepcopy(cfg["draftsmith"])
    _plant(kind, cfg)
    assert cfg["draftsmith"] != before
    (bad / "config.json").write_text(json.dumps(cfg))
    got = _host_logits(bad, d / "S" / "target", stack, anchor)
    moved = rel(got, want)
    # at 10 % of the logits' scale; with the former synth scale (every linear at 0.02) a wrong
    # rope base, a flipped causal layer and a window one too wide moved them by 1.5-4 % only
    assert moved > 0.1, f"{kind}: planted error moved the logits by only {moved:.1e} relative"
