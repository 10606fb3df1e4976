"""Crosscheck with speculators itself (the ``crosscheck`` test extra: speculators==0.9.0,
transformers==5.19.0; skipped without it). A tiny DFlash drafter is built and saved by
speculators' own classes (``DFlashSpeculatorConfig``, ``DFlashDraftModel.save_pretrained``):
draftsmith routes it without ``adapter=``, reads its transformers-5 RoPE base, converts every
tensor exactly and drafts equal to the float64 oracle run with the base speculators saved.
An export ``to=speculators`` is loaded by speculators' own ``from_pretrained`` and holds the
same tensors and the config values its loader reads."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

speculators = pytest.importorskip("speculators", reason="the crosscheck extra (speculators==0.9.0) is not installed")

from speculators.config import SpeculatorsConfig, VerifierConfig  # noqa: E402
from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig  # noqa: E402
from speculators.proposals.greedy import GreedyTokenProposalConfig  # noqa: E402
from transformers import Qwen3Config  # noqa: E402

from draftsmith.framework.cli.main import main  # noqa: E402
from draftsmith.framework.compile.adapter import load_adapter, route  # noqa: E402
from draftsmith.framework.compile.resolved import ResolvedDrafter  # noqa: E402
from draftsmith.framework.convert.execute import convert  # noqa: E402
from draftsmith.framework.convert.export import export  # noqa: E402
from draftsmith.framework.convert.synth import synthesize  # noqa: E402
from draftsmith.framework.runtime.draft import run_draft  # noqa: E402
from support.helpers import read_checkpoint  # noqa: E402
from support.oracles import draft_oracle  # noqa: E402

THETA = 123457.0


def saved_by_speculators(folder, seed: int, verifier) -> DFlashDraftModel:
    """``verifier``: a local folder (speculators resolves the verifier's final-norm style from
    it when the model is built; a hub id costs ~25 s of network retries where none is reachable)."""
    tl = Qwen3Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                     intermediate_size=128, vocab_size=256, rope_theta=THETA, max_position_embeddings=512)
    cfg = DFlashSpeculatorConfig(
        transformer_layer_config=tl, draft_vocab_size=256, block_size=4, aux_hidden_state_layer_ids=[1, 3, 5],
        mask_token_id=250, sample_from_anchor=False,
        speculators_config=SpeculatorsConfig(
            algorithm="dflash", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=str(verifier), architectures=["Qwen3ForCausalLM"])))
    torch.manual_seed(seed)
    m = DFlashDraftModel(cfg)
    with torch.no_grad():  # weights at scales where every stage moves the output (norms off 1)
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 2:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
    m.save_pretrained(str(folder))
    return m


def test_speculators_saved_converts_and_drafts(tmp_path):
    tgt_dir = tmp_path / "target"
    tgt_dir.mkdir()
    (tgt_dir / "config.json").write_text(json.dumps({"hidden_size": 64, "vocab_size": 256, "torch_dtype": "float32"}))
    m = saved_by_speculators(tmp_path / "S", seed=3, verifier=tgt_dir)
    raw = json.loads((tmp_path / "S" / "config.json").read_text())
    assert raw["architectures"] == ["DFlashDraftModel"] and "rope_theta" not in raw["transformer_layer_config"]
    adapter = route(raw)
    assert adapter.name == "speculators_dflash"
    convert(adapter, tmp_path / "S", tmp_path / "T", progress=False)
    cfg, w = read_checkpoint(tmp_path / "T")
    r = ResolvedDrafter.from_config(cfg)
    assert r.rope.theta == THETA and r.max_draft_len == 3 and r.target_layer_ids == (0, 2, 4)
    sd = {k: v for k, v in m.state_dict().items() if k in w}
    assert set(w) == set(sd)
    for k in w:
        assert torch.equal(w[k], sd[k].to(w[k].dtype)), k
    # a draft step against the float64 oracle run with the base speculators saved
    g = torch.Generator().manual_seed(5)
    from safetensors.torch import save_file
    save_file({"model.embed_tokens.weight": torch.randn(256, 64, generator=g),
               "lm_head.weight": torch.randn(256, 64, generator=g) * 0.5}, str(tgt_dir / "model.safetensors"))
    dump = tmp_path / "d.safetensors"
    run_draft(tmp_path / "T", tgt_dir, context=21, seed=2, dtype="float32", dump=dump)
    d = load_file(dump)
    oracle_cfg = dict(cfg, rope_theta=THETA)
    _, logits, _ = draft_oracle(oracle_cfg, w, load_file(tgt_dir / "model.safetensors"), d["inputs.target_hidden"],
                                int(d["inputs.anchor"][0]))
    rel = ((d["outputs.logits"].double() - logits).abs().max() / logits.abs().max()).item()
    assert rel < 1e-4


def test_export_loads_in_speculators(tmp_path, capsys):
    zl = load_adapter("zlab_dflash")
    synthesize(zl, "tiny", tmp_path / "s", seed=4)
    verifier = tmp_path / "s" / "target"  # local: speculators' loader reads embed_tokens / lm_head from it
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'x'}", "to=speculators",
                 f"verifier={verifier}"]) == 0
    loaded = DFlashDraftModel.from_pretrained(str(tmp_path / "x"))
    c = loaded.config
    assert c.draft_vocab_size == 256 and c.speculators_config.verifier.name_or_path == str(verifier)
    assert c.speculators_config.proposal_methods[0].speculative_tokens == 15
    assert c.transformer_layer_config.rope_parameters["rope_theta"] == 1000000
    exported = load_file(tmp_path / "x" / "model.safetensors")
    sd = loaded.state_dict()
    for k, t in exported.items():
        assert torch.equal(sd[k].to(t.dtype), t), k
