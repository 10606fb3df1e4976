"""Crosscheck draftsmith's draft step against speculators' own model forward (the
``crosscheck`` test extra: speculators==0.9.0, transformers==5.19.0; skipped without it).

(a) Tiny DFlash and DSpark drafters built and saved by speculators' own classes
(``DFlashDraftModel`` / ``DSparkDraftModel``, ``save_pretrained``) are converted by draftsmith
and drafted by draftsmith's reference host (``run_draft``, float32, ``dump=``); the same
inputs go through speculators' own ``forward`` (speculators 0.9.0
``models/dflash/core.py:DFlashDraftModel.forward`` / ``models/dspark/core.py:DSparkDraftModel.forward``),
whose logits (and DSpark confidence logits) are captured where that forward hands them to
its loss (``compute_metrics``, replaced by a recorder for the call). Logits at float32 agree
and give the same greedy tokens.

(b) ``convert ... to=speculators`` exports are loaded by speculators' ``from_pretrained``
(which also reads ``embed_tokens`` / ``lm_head`` from ``verifier=``) and their forward is
compared with draftsmith's draft of the source checkpoint the same way.

How the inputs are made to mean the same thing in both (speculators 0.9.0, read from
``models/dflash/core.py``, ``attention.py``, ``utils.py``):
- speculators' training forward picks anchors with ``select_anchors`` from ``loss_mask``
  (never the last ``block_size`` positions). A sequence of ``C + B + 1`` positions whose
  ``loss_mask`` is 1 only at ``C``, with ``max_anchors=1``, anchors the one block at position
  ``C`` -- draftsmith's block after a context of ``C`` tokens (block positions ``C..C+B-1``).
  The block sees base positions ``< C`` only (``before_anchor``): rows ``C..`` are filled with
  unrelated noise, which must not matter.
- Window anchoring: speculators windows the context from the block's anchor for every query
  (``kv >= anchor - W``); draftsmith counts back from each query. The sliding layers here have
  ``W >= C + B``, so both see the whole context and the whole (causal) block.
- The DSpark Markov head: speculators conditions slot ``k`` on the token at block position
  ``k`` (teacher forcing, ``block_tokens``); draftsmith's greedy chain conditions draft ``k``
  on draft ``k - 1``. Writing draftsmith's own drafts into those positions
  (``input_ids[C + k] = draft[k - 1]``) makes both condition on the same tokens, for
  ``sample_from_anchor`` true and false alike.
- Attention runs as ``eager`` (a float mask from speculators' own mask builder) instead of
  the default flex attention, whose block mask needs ``torch.compile`` (no compiler on CI).
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

speculators = pytest.importorskip("speculators", reason="the crosscheck extra (speculators==0.9.0) is not installed")

import speculators.models.dflash.core as spec_dflash_core  # noqa: E402
import speculators.models.dspark.core as spec_dspark_core  # noqa: E402
from speculators.config import SpeculatorsConfig, VerifierConfig  # noqa: E402
from speculators.models.attention import create_float_mask  # noqa: E402
from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig  # noqa: E402
from speculators.models.dspark import DSparkDraftModel, DSparkSpeculatorConfig  # noqa: E402
from speculators.proposals.greedy import GreedyTokenProposalConfig  # noqa: E402
from transformers import Qwen3Config  # noqa: E402

from draftsmith.framework.cli.main import main  # noqa: E402
from draftsmith.framework.compile.adapter import load_adapter  # noqa: E402
from draftsmith.framework.convert.synth import synthesize  # noqa: E402
from draftsmith.framework.runtime.draft import run_draft  # noqa: E402

V, H, BLOCK, CONTEXT = 256, 64, 4, 21
AUX = [1, 3, 5]  # speculators' aux ids: target layer inputs


def tiny_layer_config(rope_parameters: dict, window: int, use_sliding_window: bool = True) -> Qwen3Config:
    """A Qwen3 backbone with one sliding and one full layer (``window`` >= CONTEXT + BLOCK)."""
    tl = Qwen3Config(hidden_size=H, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                     intermediate_size=128, vocab_size=V, max_position_embeddings=4096, rms_norm_eps=1e-6,
                     use_sliding_window=use_sliding_window, sliding_window=window,
                     layer_types=["sliding_attention", "full_attention"], rope_parameters=rope_parameters)
    tl._attn_implementation = "eager"  # speculators' float mask; its default block mask needs torch.compile
    return tl


def speculators_config(algorithm: str, tokens: int, verifier) -> SpeculatorsConfig:
    """``verifier``: a local folder (speculators resolves the verifier's final-norm style from
    it at construction; a hub id would be looked up over the network)."""
    return SpeculatorsConfig(algorithm=algorithm, proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=tokens)],
                             default_proposal_method="greedy",
                             verifier=VerifierConfig(name_or_path=str(verifier), architectures=["Qwen3ForCausalLM"]))


def realistic_weights(m: torch.nn.Module, seed: int) -> None:
    """Weights at scales where every stage moves the output (norm gains off 1, unit-variance
    projections, a Markov head comparable to the logits)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif n.startswith("markov_head."):
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            elif n.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def build(kind: str, rope_parameters: dict, seed: int, verifier, window: int = 64, use_sliding_window: bool = True):
    """A tiny DFlash or DSpark drafter built by speculators' own classes."""
    tl = tiny_layer_config(rope_parameters, window, use_sliding_window)
    common = dict(transformer_layer_config=tl, draft_vocab_size=V, block_size=BLOCK, aux_hidden_state_layer_ids=AUX,
                  mask_token_id=250)
    if kind == "dflash":
        cfg = DFlashSpeculatorConfig(**common, sample_from_anchor=False,
                                     speculators_config=speculators_config("dflash", BLOCK - 1, verifier))
        m = DFlashDraftModel(cfg)
    else:
        cfg = DSparkSpeculatorConfig(**common, sample_from_anchor=True, markov_rank=8, markov_head_type="vanilla",
                                     enable_confidence_head=True, confidence_head_with_markov=True,
                                     sliding_window_non_causal=False,
                                     speculators_config=speculators_config("dspark", BLOCK, verifier))
        m = DSparkDraftModel(cfg)
    realistic_weights(m, seed)
    return m.eval()


def write_target(folder, seed: int) -> dict:
    """A target folder holding only what the drafter borrows (draftsmith's target layout and
    the verifier layout speculators' loader reads: ``model.embed_tokens.weight``, ``lm_head.weight``)."""
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(seed)
    t = {"model.embed_tokens.weight": torch.randn(V, H, generator=g),
         "lm_head.weight": torch.randn(V, H, generator=g) / H ** 0.5 * 4}
    save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                                    "hidden_size": H, "vocab_size": V, "torch_dtype": "float32"}))
    return t


def draftsmith_step(converted, target, tmp_path, seed: int) -> dict:
    """draftsmith's reference host: one float32 draft step after CONTEXT random context rows."""
    dump = tmp_path / f"dump{seed}.safetensors"
    run_draft(converted, target, context=CONTEXT, seed=seed, dtype="float32", dump=dump, repeats=1)
    return load_file(dump)


def speculators_forward(m, hidden: torch.Tensor, anchor: int, drafts: torch.Tensor, monkeypatch):
    """speculators' own ``forward`` on one block anchored after ``hidden [C, n*h]``.

    Returns ``(logits [B, V], confidence_logits [B] or None)`` as that forward hands them to
    ``compute_metrics``. ``drafts``: draftsmith's greedy drafts, written at the block's
    positions ``C+1..`` so speculators' teacher-forced Markov head sees the same previous tokens.
    """
    c, b = hidden.shape[0], m.block_size
    t = c + b + 1
    g = torch.Generator().manual_seed(1234)
    states = torch.cat([hidden.float(), 50 * torch.randn(t - c, hidden.shape[1], generator=g)])[None]
    ids = torch.randint(0, m.verifier_vocab_size, (1, t), generator=g)
    ids[0, c] = anchor
    n = min(b - 1, drafts.numel())
    ids[0, c + 1:c + 1 + n] = drafts[:n]
    loss_mask = torch.zeros(1, t, dtype=torch.long)
    loss_mask[0, c] = 1  # the only anchor select_anchors can pick
    seen = {}

    def record(logits, targets, *rest, **kw):
        seen["logits"] = logits.detach()
        seen["conf"] = rest[0].detach() if isinstance(m, DSparkDraftModel) and rest[0] is not None else None
        return logits.sum() * 0, {}

    monkeypatch.setattr(spec_dflash_core, "compute_metrics", record)
    monkeypatch.setattr(spec_dspark_core, "compute_metrics", record)
    with torch.no_grad():
        m(hidden_states=states, input_ids=ids, loss_mask=loss_mask,
          verifier_last_hidden_states=torch.zeros(1, t, m.hidden_size), document_ids=torch.zeros(1, t, dtype=torch.long),
          max_anchors=1)
    conf = seen["conf"][0] if seen["conf"] is not None else None
    return seen["logits"][0], conf


def compare(m, d: dict, monkeypatch, sample_from_anchor: bool) -> None:
    """draftsmith's dumped step ``d`` against speculators' forward on the same inputs."""
    ours, toks = d["outputs.logits"], d["outputs.tokens"]
    logits, conf = speculators_forward(m, d["inputs.target_hidden"], int(d["inputs.anchor"][0]), toks, monkeypatch)
    first = 0 if sample_from_anchor else 1
    theirs = logits[first:first + ours.shape[0]]
    rel = ((ours - theirs).abs().max() / theirs.abs().max()).item()
    assert rel < 1e-5, rel
    assert torch.equal(theirs.argmax(-1), toks)
    if conf is not None:
        assert torch.allclose(torch.sigmoid(conf[first:first + ours.shape[0]]), d["outputs.confidence"], atol=1e-5)
    # the comparison can fail: another context moves speculators' logits far beyond the tolerance
    other, _ = speculators_forward(m, torch.randn_like(d["inputs.target_hidden"]), int(d["inputs.anchor"][0]), toks,
                                   monkeypatch)
    assert ((other[first:first + ours.shape[0]] - ours).abs().max() / theirs.abs().max()).item() > 1e-2


def attach_target(m, t: dict) -> None:
    """The verifier-owned weights speculators reloads from the verifier: the same target."""
    with torch.no_grad():
        m.embed_tokens.weight.copy_(t["model.embed_tokens.weight"])
        m.lm_head.weight.copy_(t["lm_head.weight"])
        m.verifier_lm_head.weight.copy_(t["lm_head.weight"])


ROPES = {  # transformers-5 rope_parameters as speculators saves them; scaled ones run through
    # transformers' own ROPE_INIT_FUNCTIONS inside speculators' Qwen3RotaryEmbedding
    "default": {"rope_type": "default", "rope_theta": 54321.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 54321.0, "factor": 4.0, "original_max_position_embeddings": 16},
    "llama3": {"rope_type": "llama3", "rope_theta": 54321.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
}


@pytest.mark.parametrize("kind, rope", [("dflash", "default"), ("dspark", "default"), ("dflash", "yarn"),
                                        ("dspark", "llama3")])
def test_speculators_saved_drafts_like_speculators_forward(kind, rope, tmp_path, monkeypatch):
    t = write_target(tmp_path / "target", seed=8)
    m = build(kind, dict(ROPES[rope]), seed=7, verifier=tmp_path / "target")
    if rope != "default":  # the scaling reached speculators' rotary embedding
        assert m.rotary_emb.rope_type == rope
    m.save_pretrained(str(tmp_path / "S"))
    attach_target(m, t)
    assert main(["convert", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 0
    d = draftsmith_step(tmp_path / "T", tmp_path / "target", tmp_path, seed=3)
    compare(m, d, monkeypatch, sample_from_anchor=kind == "dspark")


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
@pytest.mark.parametrize("window_in_file", [False, True])
def test_sliding_layers_without_use_sliding_window_run_full(kind, window_in_file, tmp_path, monkeypatch):
    """speculators' backbone config is transformers' ``Qwen3Config``, which drops
    ``sliding_window`` unless ``use_sliding_window`` is true: its ``sliding_attention`` layers
    then see every key. A window of 6 (shorter than the context) would change the output, so
    draftsmith must read such a drafter as full attention too: as saved (``sliding_window:
    null``) and with a window written into the file anyway."""
    t = write_target(tmp_path / "target", seed=8)
    m = build(kind, dict(ROPES["default"]), seed=11, verifier=tmp_path / "target", window=6, use_sliding_window=False)
    assert m.sliding_window is None and m.uses_sliding_window_attn  # speculators: sliding layers, no window
    m.save_pretrained(str(tmp_path / "S"))
    if window_in_file:
        cfg_path = tmp_path / "S" / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["transformer_layer_config"]["sliding_window"] = 6
        cfg_path.write_text(json.dumps(cfg))
    attach_target(m, t)
    assert main(["convert", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 0
    d = draftsmith_step(tmp_path / "T", tmp_path / "target", tmp_path, seed=3)
    compare(m, d, monkeypatch, sample_from_anchor=kind == "dspark")


def widen_windows(path, window: int) -> None:
    """Every ``sliding_window`` in the config at least ``window`` (>= CONTEXT + block size), so
    speculators' anchor-based window and draftsmith's per-query window see the same keys."""
    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "sliding_window" and isinstance(v, int):
                    node[k] = max(v, window)
                else:
                    walk(v)
    cfg = json.loads(path.read_text())
    walk(cfg)
    path.write_text(json.dumps(cfg))


@pytest.mark.parametrize("source, cls", [("zlab_dflash", DFlashDraftModel), ("speculators_dspark", DSparkDraftModel)])
def test_speculators_export_runs_like_draftsmith(source, cls, tmp_path, monkeypatch):
    """An export ``to=speculators``, loaded by speculators' ``from_pretrained`` (verifier=
    the synthetic target), drafts like draftsmith's step on the converted source."""
    adapter = load_adapter(source)
    synthesize(adapter, "tiny", tmp_path / "s", seed=4)
    widen_windows(tmp_path / "s" / "config.json", CONTEXT + 16)
    target = tmp_path / "s" / "target"
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'c'}"]) == 0
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'x'}", "to=speculators",
                 f"verifier={target}"]) == 0
    loaded = cls.from_pretrained(str(tmp_path / "x"), torch_dtype=torch.float32).float().eval()
    assert type(loaded) is cls
    loaded._create_mask_fn = create_float_mask  # eager attention (see the module docstring)
    loaded.config.transformer_layer_config._attn_implementation = "eager"
    d = draftsmith_step(tmp_path / "c", target, tmp_path, seed=5)
    compare(loaded, d, monkeypatch, sample_from_anchor=loaded.config.sample_from_anchor)
