"""Crosscheck draftsmith's DFlash 2 draft step against speculators' own DFlash 2 (the
``crosscheck`` test extra: speculators==0.9.0; skipped without it).

A tiny drafter built by speculators' own classes (``models/dflash2/core.py:DFlash2DraftModel``,
``DFlash2SpeculatorConfig``; random weights, the block convolutions and the selector off their
identity / init values) is saved with ``save_pretrained``, converted by draftsmith
(``adapters/speculators_dflash2.yaml``) and drafted by the reference host (float32, ``dump=``).
The same inputs go through speculators' own training ``forward`` (inputs made to mean the same
as in tests/upstream/speculators/test_crosscheck_speculators_forward.py: one anchor at ``C``, ``max_anchors=1``,
eager attention, windows wider than the context). Compared:

- the block's unary logits (what ``_backbone_forward`` hands to the selector, captured where
  ``forward`` hands them to ``compute_metrics``) against the selector-off draft's logits;
- speculators' inference-time selector ``CandidateSelector.select(unary_logits, hidden,
  predecessor_ids)`` (``model_definitions.py``), run on the hidden states and predecessors that
  ``forward`` handed to ``score_candidates``: its candidates and edge scores against draftsmith's
  ``outputs.candidates`` / ``outputs.realized``. speculators has no walk: its predecessors are the
  block's tokens (``_predecessor_ids``, teacher forcing), so draftsmith's drafted path is written
  into the block (``input_ids[C + 1 + j] = path[j]``), making speculators' predecessors the walked
  ones; the path is then the argmax of speculators' scores at every position.

The float64 oracle (``oracles.draft_oracle``) checks the converted checkpoint independently.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

speculators = pytest.importorskip("speculators", reason="the crosscheck extra (speculators==0.9.0) is not installed")

import speculators.models.dflash2.core as spec_dflash2_core  # noqa: E402
from speculators.models.dflash2 import DFlash2DraftModel, DFlash2SpeculatorConfig  # noqa: E402

from draftsmith.framework.cli.main import main  # noqa: E402
from draftsmith.framework.compile.resolved import ResolvedDrafter  # noqa: E402
from draftsmith.framework.runtime.draft import run_draft  # noqa: E402
from support.helpers import read_checkpoint  # noqa: E402
from support.oracles import draft_oracle  # noqa: E402
from test_crosscheck_speculators_forward import (AUX, CONTEXT, ROPES, V, attach_target, speculators_config,  # noqa: E402
                                                 tiny_layer_config, write_target)

BLOCK, RANK, TOP_K, GROUP = 6, 8, 5, 16


def build(seed: int, verifier, non_causal: bool) -> DFlash2DraftModel:
    """A tiny DFlash 2 drafter from speculators' own classes, every weight random: norm gains off 1,
    unit-variance projections, base kernels off the identity ``[1, 0, ...]``, a kernel projection
    that moves the convolution, codebooks whose transition term competes with the logits."""
    tl = tiny_layer_config(dict(ROPES["default"]), window=64)
    cfg = DFlash2SpeculatorConfig(transformer_layer_config=tl, draft_vocab_size=V, block_size=BLOCK,
                                  aux_hidden_state_layer_ids=AUX, mask_token_id=250, sample_from_anchor=False,
                                  sliding_window_non_causal=non_causal, conv_kernel_size=3, conv_group_size=GROUP,
                                  selector_rank=RANK, selector_top_k=TOP_K,
                                  speculators_config=speculators_config("dflash2", BLOCK - 1, verifier))
    m = DFlash2DraftModel(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif n.endswith("base_kernel"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif n.endswith("_codebook"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return m.eval()


def speculators_selector(m, hidden: torch.Tensor, anchor: int, path: torch.Tensor, monkeypatch):
    """speculators' forward on one block after ``hidden [C, n*h]`` with ``path`` at block slots 1..:
    ``(unary logits [B, V], candidates [B, k], edge scores [B, k])`` from ``CandidateSelector.select``
    on the hidden states and predecessors ``forward`` handed to ``score_candidates``."""
    c, b = hidden.shape[0], m.block_size
    t = c + b + 1
    g = torch.Generator().manual_seed(1234)
    states = torch.cat([hidden.float(), 50 * torch.randn(t - c, hidden.shape[1], generator=g)])[None]
    ids = torch.randint(0, m.verifier_vocab_size, (1, t), generator=g)
    ids[0, c] = anchor
    ids[0, c + 1:c + b] = path[:b - 1]
    loss_mask = torch.zeros(1, t, dtype=torch.long)
    loss_mask[0, c] = 1  # the only anchor select_anchors can pick
    seen = {}
    original = m.candidate_selector.score_candidates

    def score(unary, hidden_states, predecessor_ids, candidate_ids):
        seen.update(unary=unary.detach(), hidden=hidden_states.detach(), pred=predecessor_ids.detach())
        return original(unary, hidden_states, predecessor_ids, candidate_ids)

    monkeypatch.setattr(m.candidate_selector, "score_candidates", score)
    monkeypatch.setattr(spec_dflash2_core, "compute_metrics", lambda **kw: (kw["unary_logits"].sum() * 0, {}))
    with torch.no_grad():
        m(hidden_states=states, input_ids=ids, loss_mask=loss_mask,
          verifier_last_hidden_states=torch.zeros(1, t, m.hidden_size), document_ids=torch.zeros(1, t, dtype=torch.long),
          max_anchors=1)
        monkeypatch.undo()
        cand, scores = m.candidate_selector.select(seen["unary"], seen["hidden"], seen["pred"])
    assert seen["pred"][0, 1].item() == anchor and torch.equal(seen["pred"][0, 2:b], path[:b - 2])
    return seen["unary"][0], cand[0], scores[0]


def step(tmp_path, name: str, selector: bool) -> dict:
    dump = tmp_path / f"{name}.safetensors"
    run_draft(tmp_path / "T", tmp_path / "target", context=CONTEXT, seed=3, dtype="float32", dump=dump, repeats=1,
              selector=selector)
    return load_file(dump)


@pytest.mark.parametrize("non_causal", [True, False])
def test_speculators_dflash2_saved_drafts_like_speculators(non_causal, tmp_path, monkeypatch):
    t = write_target(tmp_path / "target", seed=8)
    m = build(7, tmp_path / "target", non_causal)
    m.save_pretrained(str(tmp_path / "S"))
    raw = json.loads((tmp_path / "S" / "config.json").read_text())
    assert raw["speculators_model_type"] == "dflash2" and raw["sliding_window_non_causal"] is non_causal
    attach_target(m, t)
    assert main(["convert", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 0
    cfg, w = read_checkpoint(tmp_path / "T")
    r = ResolvedDrafter.from_config(cfg)
    assert r.dflash2.conv.kernel_size == 3 and r.dflash2.selector.top_k == TOP_K and r.max_draft_len == BLOCK - 1
    assert r.dflash2.selector.unary.multiplier == 1.0 and r.dflash2.selector.unary.softcap is None
    sd = m.state_dict()
    for k in w:
        assert torch.equal(w[k], sd[k].to(w[k].dtype)), k

    d, plain = step(tmp_path, "sel", True), step(tmp_path, "plain", False)
    hidden, anchor, path = d["inputs.target_hidden"], int(d["inputs.anchor"][0]), d["outputs.tokens"]
    unary, cand, scores = speculators_selector(m, hidden, anchor, path, monkeypatch)
    k = path.shape[0]
    # block slots 1..K draft; the unary logits are the selector-off draft's
    ours = plain["outputs.logits"]
    rel = ((ours - unary[1:1 + k]).abs().max() / unary.abs().max()).item()
    assert rel < 1e-5, rel
    assert torch.equal(plain["outputs.tokens"], unary[1:1 + k].argmax(-1))
    # the selector: speculators' candidates (its top-k, sorted) and edge scores for the walked predecessors
    assert torch.equal(d["outputs.candidates"], cand[1:1 + k])
    rel = ((d["outputs.realized"] - scores[1:1 + k]).abs().max() / scores.abs().max()).item()
    assert rel < 1e-5, rel
    walked = cand[1:1 + k].gather(-1, scores[1:1 + k].argmax(-1, keepdim=True)).squeeze(-1)
    assert torch.equal(walked, path)
    assert not torch.equal(path, plain["outputs.tokens"]), "the selector should move at least one draft here"

    # the float64 oracle on the converted checkpoint
    tokens, logits = draft_oracle(cfg, w, load_file(tmp_path / "target" / "model.safetensors"), hidden.double(),
                                  anchor, selector=True)[:2]
    assert torch.equal(tokens, path)
    seen = torch.isfinite(logits)
    assert torch.equal(seen, torch.isfinite(d["outputs.logits"]))
    rel = ((d["outputs.logits"].double()[seen] - logits[seen]).abs().max() / logits[seen].abs().max()).item()
    assert rel < 1e-5, rel

    # the comparison can fail: another context moves speculators' scores beyond the tolerance
    _, _, other = speculators_selector(m, torch.randn_like(hidden), anchor, path, monkeypatch)
    assert ((other[1:1 + k] - d["outputs.realized"]).abs().max() / scores.abs().max()).item() > 1e-2


def test_absent_keys_read_as_speculators_config_class_reads_them(tmp_path, capsys):
    """A config without ``conv_kernel_size``, ``conv_group_size``, ``sliding_window_non_causal``:
    draftsmith's record takes what speculators' own ``DFlash2SpeculatorConfig.from_pretrained`` reads
    (its Field defaults), the spec defaults are listed in the loading report, and the windowed layer
    is non-causal (DFlash 2's default, unlike DFlash's)."""
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.convert.synth import synthesize

    synthesize(load_adapter("speculators_dflash2"), "tiny", tmp_path / "s", seed=4)
    path = tmp_path / "s" / "config.json"
    c = json.loads(path.read_text())
    for k in ("conv_kernel_size", "conv_group_size", "sliding_window_non_causal"):
        del c[k]
    path.write_text(json.dumps(c))
    theirs = DFlash2SpeculatorConfig.from_pretrained(str(tmp_path / "s"))
    capsys.readouterr()
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'T'}"]) == 0
    report = capsys.readouterr().out
    assert "conv.kernel_size = 2  (spec default" in report and "conv.group_size = 16  (spec default" in report
    r = ResolvedDrafter.from_config(read_checkpoint(tmp_path / "T")[0])
    assert (r.dflash2.conv.kernel_size, r.dflash2.conv.group_size) == (theirs.conv_kernel_size, theirs.conv_group_size)
    assert (r.dflash2.selector.rank, r.dflash2.selector.top_k) == (theirs.selector_rank, theirs.selector_top_k)
    windowed = [l.mask for l in r.layers if l.mask.window is not None]
    assert windowed and all(m.causal is (not theirs.sliding_window_non_causal) for m in windowed)
