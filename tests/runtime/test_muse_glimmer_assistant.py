"""Issue 37 part 5: Meta's Muse-Glimmer assistant, checked against its writer's own forward.
The writer is transformers' ``MuseGlimmerAssistantModel`` (installed: 5.19): a tiny one is built
and saved by ``save_pretrained``; it routes to adapters/meta_muse_glimmer.yaml without
``adapter=``, converts (``encoder.fc`` / ``encoder.output_norm_enc`` renamed), every config key
is accounted for in the loading report, and draftsmith's draft step equals the writer's forward
driven as transformers' ``DFlashTokenCandidateGenerator`` drives it (and the float64 oracle)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("transformers.models.muse_glimmer_assistant", reason="the writer is transformers' own (5.19)")

from draftsmith.framework.cli.main import main  # noqa: E402
from draftsmith.framework.compile.adapter import route  # noqa: E402
from draftsmith.framework.compile.resolved import ResolvedDrafter  # noqa: E402
from draftsmith.framework.runtime.draft import run_draft  # noqa: E402
from support.helpers import read_checkpoint  # noqa: E402
from support.oracles import draft_oracle  # noqa: E402
from support.numerics import rel  # noqa: E402

CONTEXT, V, H = 21, 256, 64


def writer(window: int, layers, seed: int):
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel
    cfg = MuseGlimmerAssistantConfig(hidden_size=H, intermediate_size=128, num_hidden_layers=len(layers),
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=window,
                                     layer_types=list(layers), block_size=8, mask_token_id=250,
                                     target_layer_ids=[1, 3, 5], rope_parameters={"rope_type": "default",
                                                                                  "rope_theta": 4321.0})
    cfg._attn_implementation = "eager"
    m = MuseGlimmerAssistantModel(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g) if n.endswith("norm.weight") or "norm_enc" in n
                    else torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return m


def write_target(folder, seed: int) -> None:
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(seed)
    save_file({"model.embed_tokens.weight": torch.randn(V, H, generator=g),
               "lm_head.weight": torch.randn(V, H, generator=g) / H ** 0.5 * 4}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architectures": ["MuseGlimmerForConditionalGeneration"],
                                                    "model_type": "muse_glimmer", "hidden_size": H, "vocab_size": V,
                                                    "torch_dtype": "float32"}))


def writer_step(m, d: dict, hidden=None):
    """The generator's first draft call after a prompt of C tokens: the assistant cache told of C
    accepted tokens, positions 0..C+B-1, noise [anchor, mask x (B-1)] embedded with the target's
    table, the target's head on last_hidden_state[:, 1:]."""
    from transformers.cache_utils import DFlashCache
    hidden = d["inputs.target_hidden"] if hidden is None else hidden
    c, b = hidden.shape[0], m.config.block_size
    ids = torch.tensor([int(d["inputs.anchor"][0])] + [m.config.mask_token_id] * (b - 1))
    cache = DFlashCache(config=m.config)
    cache.set_previous_accepted_tokens(c)
    with torch.no_grad():
        out = m(noise_embeds=d["target.embed_tokens"][ids][None], context_hidden_states=hidden[None],
                position_ids=torch.arange(c + b)[None], past_key_values=cache)
        logits = out.last_hidden_state[0, 1:] @ d["target.lm_head"].T
    return logits.argmax(-1), logits


def convert_and_draft(m, tmp_path, *overrides, extra=None):
    m.save_pretrained(str(tmp_path / "S"))
    raw = json.loads((tmp_path / "S" / "config.json").read_text())
    assert "vocab_size" not in raw and route(raw).name == "meta_muse_glimmer"
    raw = dict(raw, vocab_size=V, **(extra or {}))  # vocab_size: a reader's override, as vLLM's
    (tmp_path / "S" / "config.json").write_text(json.dumps(raw))
    write_target(tmp_path / "target", seed=12)
    assert main(["convert", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}", *overrides]) == 0
    dump = tmp_path / "dump.safetensors"
    run_draft(tmp_path / "T", tmp_path / "target", context=CONTEXT, seed=4, dtype="float32", dump=dump, repeats=1)
    return load_file(dump)


@pytest.mark.parametrize("layers", [("sliding_attention", "full_attention"), ("full_attention", "full_attention")])
def test_writer_saved_drafts_like_the_writer(layers, tmp_path, capsys):
    """A window wider than context + block (the writer's and draftsmith's windows then agree):
    the rename, plain norms, rope base, output ids and B-1 slots decide equality."""
    m = writer(window=64, layers=layers, seed=11)
    d = convert_and_draft(m, tmp_path)
    toks, logits = writer_step(m, d)
    assert rel(d["outputs.logits"], logits) < 1e-5 and torch.equal(toks, d["outputs.tokens"])
    _, other = writer_step(m, d, torch.randn_like(d["inputs.target_hidden"]))
    assert rel(other, logits) > 1e-2  # the check can fail
    cfg, w = read_checkpoint(tmp_path / "T")
    _, ologits, _ = draft_oracle(cfg, w, load_file(tmp_path / "target" / "model.safetensors"),
                                 d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    assert rel(logits, ologits) < 1e-4
    r = ResolvedDrafter.from_config(cfg)
    assert r.sample_from_anchor is False and list(r.target_layer_ids) == [1, 3, 5]
    capsys.readouterr()
    assert main(["inspect", f"source={tmp_path / 'S'}"]) == 0
    out = capsys.readouterr().out
    for key in ("attention_dropout", "bos_token_id", "pad_token_id", "max_position_embeddings", "transformers_version"):
        assert f"irrelevant {key}  (" in out
    assert "fc.weight <- encoder.fc.weight" in out and "hidden_norm.weight <- encoder.output_norm_enc.weight" in out


def test_writer_window_reaches_one_key_further(tmp_path):
    """The documented limitation, on the writer's own code: its eager bidirectional sliding mask
    keeps ``abs(q - k) <= W``; draftsmith (as flash-attn and vLLM) keeps ``<= W - 1``. With the
    context longer than the window the writer with ``sliding_window: W`` drafts as draftsmith
    with ``W + 1``, and not as draftsmith with ``W``."""
    from transformers.masking_utils import sliding_window_bidirectional_overlay
    assert sliding_window_bidirectional_overlay(8)(0, 0, 20, 12) is True
    m = writer(window=8, layers=("sliding_attention", "sliding_attention"), seed=13)
    d = convert_and_draft(m, tmp_path)
    _, logits = writer_step(m, d)
    assert rel(d["outputs.logits"], logits) > 1e-4
    d9 = convert_and_draft(m, tmp_path / "w9", "adapter=meta_muse_glimmer", "adapter.attention.window=9")
    assert rel(d9["outputs.logits"], writer_step(m, d9)[1]) < 1e-5


def test_is_causal_is_ignored_as_the_writer_does(tmp_path, capsys):
    """``is_causal: true`` in the config: the writer's attention stays non-causal (its loaded model
    drafts as before), so draftsmith's does too, and ``inspect`` names vLLM, which would not."""
    from transformers import MuseGlimmerAssistantModel
    m = writer(window=64, layers=("full_attention", "full_attention"), seed=17)
    d = convert_and_draft(m, tmp_path, extra={"is_causal": True})
    loaded = MuseGlimmerAssistantModel.from_pretrained(str(tmp_path / "S"), dtype=torch.float32,
                                                       attn_implementation="eager").eval()
    toks, logits = writer_step(loaded, d)
    assert rel(d["outputs.logits"], logits) < 1e-5 and torch.equal(toks, d["outputs.tokens"])
    capsys.readouterr()
    assert main(["inspect", f"source={tmp_path / 'S'}"]) == 0
    out = capsys.readouterr().out
    assert "ignored as the writer does: is_causal  (a reader differs: " in out and "vLLM" in out
    assert "0: non-causal full" in out


def test_unknown_key_is_refused(tmp_path, capsys):
    m = writer(window=64, layers=("full_attention",), seed=3)
    m.save_pretrained(str(tmp_path / "S"))
    raw = json.loads((tmp_path / "S" / "config.json").read_text())
    (tmp_path / "S" / "config.json").write_text(json.dumps(dict(raw, vocab_size=V, output_multiplier=0.2)))
    capsys.readouterr()
    assert main(["convert", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "output_multiplier: not read by family gqa_dflash nor adapter meta_muse_glimmer" in err[0]
    assert not (tmp_path / "T").exists()


def test_export_loads_and_drafts_in_the_writer(tmp_path):
    """``convert to=meta_muse_glimmer`` of a z-lab drafter: transformers' own ``from_pretrained``
    loads it with no missing, unexpected or mis-shaped tensor and drafts like draftsmith."""
    from transformers import MuseGlimmerAssistantModel
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.convert.synth import synthesize
    synthesize(load_adapter("zlab_dflash"), "tiny", tmp_path / "s", seed=6)
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'c'}"]) == 0
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'x'}", "to=meta_muse_glimmer"]) == 0
    raw = json.loads((tmp_path / "x" / "config.json").read_text())
    assert raw["architectures"] == ["MuseGlimmerAssistantModel"] and route(raw).name == "meta_muse_glimmer"
    m, info = MuseGlimmerAssistantModel.from_pretrained(str(tmp_path / "x"), output_loading_info=True,
                                                        dtype=torch.float32, attn_implementation="eager")
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    assert m.config.rope_parameters["rope_theta"] == 1e6 and m.config.block_size == raw["block_size"]
    dump = tmp_path / "dump.safetensors"
    run_draft(tmp_path / "c", tmp_path / "s" / "target", context=CONTEXT, seed=3, dtype="float32", dump=dump,
              repeats=1)
    d = load_file(dump)
    toks, logits = writer_step(m.eval(), d)
    assert rel(d["outputs.logits"], logits) < 1e-5 and torch.equal(toks, d["outputs.tokens"])
    assert main(["convert", f"source={tmp_path / 'x'}", f"out={tmp_path / 'back'}"]) == 0  # every key accounted for
