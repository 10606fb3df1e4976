"""Issue 37 part 5: DeepSeek's dense DSpark (``Qwen3DSparkModel``, DeepSpec), checked against
its writer as played by ``tests/upstream/deepspec/deepspec_qwen3_dspark.py`` (transcribed from
deepseek-ai/DeepSpec with provenance, on transformers' own Qwen3 blocks and save_pretrained).
A tiny drafter built with DeepSpec's ``build_draft_config`` from a target's ``Qwen3Config`` and
saved as the writer saves it routes to adapters/deepseek_dspark_dense.yaml without
``adapter=``, converts with every config key accounted for, and drafts (tokens, logits,
confidence) equal to the writer's proposal and to the float64 oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("transformers", reason="the stand-in runs on transformers' Qwen3 building blocks")

import deepspec_qwen3_dspark as DS  # noqa: E402
from draftsmith.framework.cli.main import main  # noqa: E402
from draftsmith.framework.compile.adapter import route  # noqa: E402
from draftsmith.framework.compile.resolved import ResolvedDrafter  # noqa: E402
from draftsmith.framework.runtime.draft import run_draft  # noqa: E402
from support.helpers import read_checkpoint  # noqa: E402
from support.oracles import draft_oracle  # noqa: E402
from support.numerics import rel  # noqa: E402

CONTEXT, V, H = 21, 256, 64


def writer(seed: int, with_markov: bool = True, rope_theta: float = 54321.0):
    from transformers import Qwen3Config
    target = Qwen3Config(hidden_size=H, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, intermediate_size=128, vocab_size=V, rms_norm_eps=1e-6,
                         rope_parameters={"rope_type": "default", "rope_theta": rope_theta})
    cfg = DS.build_draft_config(target, num_draft_layers=2, block_size=7, mask_token_id=250,
                                target_layer_ids=[1, 3, 5], num_anchors=64, markov_rank=16,
                                confidence_head_with_markov=with_markov)
    m = DS.Qwen3DSparkModel(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif n == "lm_head.weight":
                p.copy_(torch.randn(p.shape, generator=g) / H ** 0.5 * 4)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5 * (3 if "markov" in n else 1))
    return m


def save_target(m, folder: Path) -> None:
    """The target whose embeddings and head the drafter holds frozen copies of."""
    folder.mkdir(parents=True)
    save_file({"model.embed_tokens.weight": m.embed_tokens.weight.detach().clone(),
               "lm_head.weight": m.lm_head.weight.detach().clone()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                                    "hidden_size": H, "vocab_size": V, "torch_dtype": "float32"}))


@pytest.mark.parametrize("with_markov", [True, False])
def test_writer_saved_drafts_like_the_writer(with_markov, tmp_path, capsys):
    m = writer(seed=5, with_markov=with_markov)
    m.save_pretrained(str(tmp_path / "S"))
    raw = json.loads((tmp_path / "S" / "config.json").read_text())
    assert raw["architectures"] == ["Qwen3DSparkModel"] and route(raw).name == "deepseek_dspark_dense"
    assert "target_layer_ids" in raw and "dflash_config" not in raw  # top-level, as vLLM's qwen3_dspark reads
    save_target(m, tmp_path / "target")
    assert main(["convert", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 0
    dump = tmp_path / "dump.safetensors"
    run_draft(tmp_path / "T", tmp_path / "target", context=CONTEXT, seed=3, dtype="float32", dump=dump, repeats=1)
    d = load_file(dump)
    toks, logits, conf = DS.propose(m, d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    assert toks.numel() == 7  # block_size tokens: slot 0 drafts
    assert rel(d["outputs.logits"], logits) < 1e-5 and torch.equal(toks, d["outputs.tokens"])
    assert torch.allclose(d["outputs.confidence"].double(), conf.double(), atol=1e-5)
    _, other, _ = DS.propose(m, torch.randn_like(d["inputs.target_hidden"]), int(d["inputs.anchor"][0]))
    assert rel(other, logits) > 1e-2  # the check can fail
    cfg, w = read_checkpoint(tmp_path / "T")
    otoks, ologits, oconf = draft_oracle(cfg, w, load_file(tmp_path / "target" / "model.safetensors"),
                                         d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    assert rel(logits, ologits) < 1e-4 and torch.equal(toks, otoks)
    assert torch.allclose(conf.double(), oconf, atol=1e-5)
    r = ResolvedDrafter.from_config(cfg)
    assert r.sample_from_anchor is True and list(r.target_layer_ids) == [1, 3, 5]
    capsys.readouterr()
    assert main(["inspect", f"source={tmp_path / 'S'}"]) == 0
    out = capsys.readouterr().out
    assert "shared with target (ignored): embed_tokens.weight, lm_head.weight" in out
    for key in ("num_anchors", "num_target_layers", "tie_word_embeddings", "max_window_layers"):
        assert f"irrelevant {key}  (" in out


def test_synth_writes_the_writers_tensors(tmp_path):
    """``synth`` writes the layout the stand-in's ``from_pretrained`` loads with nothing missing
    or unexpected (the frozen embedding / head copies included)."""
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.convert.synth import synthesize
    synthesize(load_adapter("deepseek_dspark_dense"), "tiny", tmp_path / "s", seed=2, layout="transformers5")
    _, info = DS.Qwen3DSparkModel.from_pretrained(str(tmp_path / "s"), output_loading_info=True, dtype=torch.float32)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info


def test_unknown_key_is_refused(tmp_path, capsys):
    m = writer(seed=1)
    m.save_pretrained(str(tmp_path / "S"))
    raw = json.loads((tmp_path / "S" / "config.json").read_text())
    (tmp_path / "S" / "config.json").write_text(json.dumps(dict(raw, dspark_draft_topk=8)))
    capsys.readouterr()
    assert main(["convert", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dspark_draft_topk: not read by family gqa_dflash nor adapter deepseek_dspark_dense" in err[0]
    assert not (tmp_path / "T").exists()
