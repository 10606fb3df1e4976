"""adapters/zlab_dflash2.yaml against z-lab's own DFlash 2 forward, as played by the stand-in
``standin/zlab_dflash2_model.py`` (z-lab/dflash ``dflash/model.py`` @ 1012959, on transformers'
Qwen3 building blocks and ``from_pretrained``; see PROVENANCE.md). CPU, float32.

A z-lab-layout checkpoint (the tiny synthetic one, and the trained fixture
tests/fixtures/tiny_pair/dflash2 with its target) is loaded by the stand-in the way z-lab's
``DFlash2DraftModel.from_pretrained`` loads it (strict: no missing / unexpected tensor) and
converted by draftsmith; on the same context and anchor both give the same block hidden states,
the same logits after z-lab's ``compute_logits`` unary transform (draftsmith: its selector's
``UnaryTransform`` on ``lm_head``), at temperature 0 the same selector path and candidate sets,
and at temperature 1 z-lab's returned ``q`` rows on z-lab's sampled path equal
``softmax`` of draftsmith's edge scores on that path. Tolerance: relative (max-abs over max-abs)
``TOL = 1e-5`` in float32. A conv weight perturbed in draftsmith's converted checkpoint, the
unary order swapped in its converted config, or the selector's predecessors unshifted, fails the
comparison.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("transformers", reason="the stand-in runs on transformers' Qwen3 building blocks")
sys.path.insert(0, str(Path(__file__).parent / "standin"))

import zlab_dflash2_model as Z  # noqa: E402
from draftsmith.framework.cli.main import main  # noqa: E402
from draftsmith.framework.compile.adapter import load_adapter  # noqa: E402
from draftsmith.framework.compile.resolved import ResolvedDrafter  # noqa: E402
from draftsmith.framework.convert.synth import synthesize  # noqa: E402
from draftsmith.framework.runtime.dflash import DFlashDraftModel  # noqa: E402
from support.helpers import fake_target, read_checkpoint  # noqa: E402
from support.numerics import rel  # noqa: E402

TOL = 1e-5
CONTEXT = 13
FIXTURE = Path(__file__).parents[2] / "fixtures" / "tiny_pair"


def host(converted: Path, tgt: dict, hidden: torch.Tensor, anchor: int):
    """draftsmith's host on ``converted``: ``(z [K, h], unary(lm_head z) [K, V], selector output,
    model)`` for one sequence."""
    cfg, w = read_checkpoint(converted)
    model = DFlashDraftModel(ResolvedDrafter.from_config(cfg), dtype=torch.float32)
    model.load_weights(w)
    model.load_weights_from_target_model(fake_target(tgt["model.embed_tokens.weight"].float(),
                                                     tgt["lm_head.weight"].float()))
    cache = model.make_cache(1, max_context=hidden.shape[0])
    model.append_context(cache, hidden, seq=0)
    a = torch.tensor([anchor])
    with torch.inference_mode():
        z = model.forward(*model.block_inputs(a, cache), cache)[:, model.cfg.first_slot:]
        logits = model.candidate_selector.unary(model.lm_head(z))
    out = model.draft(a, cache, selector=True)
    return z[0], logits[0], out.selector, model


def q_on_path(model, z, anchor: int, path, candidates, temperature: float):
    """draftsmith's edge scores along the path z-lab walked: ``softmax(S[j, p_j] / T)`` at
    z-lab's candidate order (``p_j``: the slot of z-lab's step ``j-1`` token; the anchor at ``j = 0``);
    ``None`` when the candidate sets differ."""
    with torch.inference_mode():
        ids, s = model.candidate_selector.scores(model.lm_head(z[None]), z[None], torch.tensor([anchor]))
    if not torch.equal(ids[0].sort(-1).values, candidates.sort(-1).values):
        return None
    rows = []
    for j in range(ids.shape[1]):
        p = 0 if j == 0 else (ids[0, j - 1] == path[j - 1]).nonzero()[0, 0]
        q = torch.softmax(s[0, j, p].double() / temperature, -1)
        order = [(ids[0, j] == c).nonzero()[0, 0] for c in candidates[j]]
        rows.append(q[torch.stack(order)])
    return torch.stack(rows)


def compare(standin, converted: Path, tgt: dict, seed: int) -> dict:
    """How far draftsmith is from the stand-in on a fresh context: relative differences of the
    hidden states, logits and (temperature 1) q rows, and whether path / candidate sets agree."""
    g = torch.Generator().manual_seed(seed)
    n_ids = len(Z._draft_value(standin.config, "target_layer_ids"))
    hidden = torch.randn(CONTEXT, n_ids * standin.config.hidden_size, generator=g)
    anchor = int(torch.randint(0, standin.config.vocab_size, (1,), generator=g))
    embed, head = tgt["model.embed_tokens.weight"].float(), tgt["lm_head.weight"].float()
    zl = Z.draft_block(standin, embed, head, hidden, anchor)
    z, logits, sel, model = host(converted, tgt, hidden, anchor)
    torch.manual_seed(seed)
    sampled = Z.draft_block(standin, embed, head, hidden, anchor, temperature=1.0)
    q = q_on_path(model, z, anchor, sampled["path"], sampled["candidates"], 1.0)
    return dict(hidden=rel(z, zl["hidden"]), logits=rel(logits, zl["logits"]),
                path=torch.equal(sel.tokens[0], zl["path"]),
                candidates=torch.equal(sel.candidates[0].sort(-1).values, zl["candidates"].sort(-1).values),
                q=float("inf") if q is None else rel(q, sampled["q"]), greedy_differs=not torch.equal(zl["path"], zl["logits"].argmax(-1)),
                sampled_differs=not torch.equal(sampled["path"], zl["path"]))


def agrees(d: dict) -> bool:
    return d["hidden"] < TOL and d["logits"] < TOL and d["q"] < TOL and d["path"] and d["candidates"]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("zlab2")
    synthesize(load_adapter("zlab_dflash2"), "tiny", root / "s", seed=7)
    assert main(["convert", f"source={root / 's'}", f"out={root / 'c'}"]) == 0
    return root, Z.load(root / "s"), load_file(root / "s" / "target" / "model.safetensors")


def test_synthetic_drafts_like_zlab(synthetic):
    root, standin, tgt = synthetic
    for seed in (1, 2):
        d = compare(standin, root / "c", tgt, seed)
        assert agrees(d), d
        # the comparison sees the selector: its path is not the plain argmax, and sampling moved it
        assert d["greedy_differs"] and d["sampled_differs"], d


def test_trained_fixture_drafts_like_zlab(tmp_path):
    """The trained z-lab-layout drafter (bf16) of tests/fixtures/tiny_pair, with its target."""
    assert main(["convert", f"source={FIXTURE / 'dflash2'}", f"out={tmp_path / 'c'}"]) == 0
    standin = Z.load(FIXTURE / "dflash2")
    d = compare(standin, tmp_path / "c", load_file(FIXTURE / "target" / "model.safetensors"), seed=3)
    assert agrees(d), d


def test_perturbed_conv_weight_fails(synthetic, tmp_path):
    root, standin, tgt = synthetic
    bad = tmp_path / "c"
    assert main(["convert", f"source={root / 's'}", f"out={bad}"]) == 0
    w = load_file(bad / "model.safetensors")
    t = w["layers.0.attention_conv.base_kernel"]
    w["layers.0.attention_conv.base_kernel"] = t + 0.05 * t.float().std() * torch.randn(t.shape).to(t.dtype)
    save_file(w, str(bad / "model.safetensors"), metadata={"format": "pt"})
    d = compare(standin, bad, tgt, seed=1)
    assert not agrees(d) and d["hidden"] > 1e-3, d


def test_swapped_unary_order_fails(synthetic, tmp_path):
    """draftsmith's converted config with the unary order swapped to ``cap_then_scale`` (vLLM's
    order, ``m * cap * tanh(l / cap)``): the host follows it, z-lab's ``compute_logits`` does not."""
    root, standin, tgt = synthetic
    shutil.copytree(root / "c", tmp_path / "c")
    raw = json.loads((tmp_path / "c" / "config.json").read_text())
    assert raw["draftsmith"]["dflash2"]["selector"]["unary"]["order"] == "scale_then_cap"
    raw["draftsmith"]["dflash2"]["selector"]["unary"]["order"] = "cap_then_scale"
    raw["dflash_config"]["selector_unary_order"] = "cap_then_scale"
    (tmp_path / "c" / "config.json").write_text(json.dumps(raw))
    d = compare(standin, tmp_path / "c", tgt, seed=1)
    assert d["hidden"] < TOL and d["logits"] > 1e-2 and not agrees(d), d


def test_standin_loads_strictly(synthetic, tmp_path):
    """z-lab's key_mapping reads the bare codebooks; a checkpoint missing one is refused."""
    root, standin, _ = synthetic
    w = load_file(root / "s" / "model.safetensors")
    assert "candidate_selector.predecessor_codebook" in w
    assert torch.equal(standin.candidate_selector.predecessor_codebook.weight,
                       w["candidate_selector.predecessor_codebook"].float())
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text((root / "s" / "config.json").read_text())
    save_file({k: v for k, v in w.items() if "successor" not in k}, str(tmp_path / "m" / "model.safetensors"),
              metadata={"format": "pt"})
    with pytest.raises(Z.LoadRefused, match="successor_codebook"):
        Z.load(tmp_path / "m")


def test_unshifted_predecessors_fail(synthetic, monkeypatch):
    """draftsmith's selector conditioning every step on the anchor (not the previous pick):
    the hidden states and logits still agree, the selector's path or q rows do not."""
    from draftsmith.framework.runtime import dflash2 as host2
    root, standin, tgt = synthetic
    monkeypatch.setattr(host2, "predecessor_ids",
                        lambda ids, anchors: anchors.to(ids.dtype)[:, None, None].expand(ids.shape).clone())
    d = compare(standin, root / "c", tgt, seed=1)
    assert d["hidden"] < TOL and d["logits"] < TOL and not agrees(d), d
    assert d["q"] > 1e-3 or not d["path"], d
