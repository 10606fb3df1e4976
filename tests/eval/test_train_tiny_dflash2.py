"""bench/train_tiny_dflash2.py's training model and objective, against code it did not write:

- the block hidden states equal z-lab's DFlash layers (the stand-in
  tests/upstream/zlab/standin/zlab_dflash_model.py, on transformers' Qwen3 blocks) with
  every sublayer wrapped by the float64 convolution oracle (tests/support/oracles_dflash2.py), the
  context left unconvolved; a planted change (the convolution dropped) is seen;
- the selector objective (speculators' ``selector_training_candidates`` and teacher-forced
  scores) equals direct sums written here;
- the saved config reads in transformers' ``Qwen3Config`` as the windows and rope it declares;
- the script loads framework/runtime/dflash2.py where pydantic is missing (the GPU machine).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(Path(__file__).parents[1] / "upstream" / "zlab" / "standin"))

from support import oracles_dflash2 as O  # noqa: E402
import train_tiny_dflash2 as T  # noqa: E402
import zlab_dflash_model as Z  # noqa: E402
from transformers import Qwen3Config  # noqa: E402

H, V, C = 128, 256, 40  # hidden, vocab, context length before the anchor


def small_drafter(seed: int, conv: bool) -> T.DFlash2Drafter:
    """The training drafter with random weights everywhere (norms and convolutions too when ``conv``)."""
    torch.manual_seed(seed)
    d = T.DFlash2Drafter(H, V, T.DRAFT).double()
    with torch.no_grad():
        for name, p in d.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif "_conv." in name and conv:
                p.copy_((1.0 if name.endswith("base_kernel") else 0.0) + 0.3 * torch.randn_like(p))
    return d


def zlab_reference(d: T.DFlash2Drafter, hidden: torch.Tensor, ids: torch.Tensor, embed: torch.Tensor) -> torch.Tensor:
    """z-lab's DFlash forward (stand-in, float64) with each sublayer wrapped by the oracle's
    convolution: ``[B, h]`` final-normed block states of one block after ``hidden [C, 3h]``."""
    from transformers import Qwen3Config

    s = T.DRAFT
    cfg = Qwen3Config(**{k: v for k, v in T.zlab_config(Qwen3Config(hidden_size=H, vocab_size=V, num_hidden_layers=6,
                                                                     max_position_embeddings=4096), "x").items()
                         if k not in ("architectures", "transformers_version", "dtype")},
                      block_size=s["block"])
    m = Z.DFlashDraftModel(cfg).double()
    state = {k: v for k, v in d.state_dict().items() if "_conv." not in k and "candidate_selector" not in k}
    m.load_state_dict(state, strict=True)
    b = s["block"]
    ctx = m.hidden_norm(m.fc(hidden[None]))
    noise = embed[ids][None]
    cos_sin = m.rotary_emb(noise, torch.arange(C + b)[None])
    x = noise[0]
    for layer, mine in zip(m.layers, d.layers):
        attn = lambda u, layer=layer: layer.self_attn(u[None], ctx, cos_sin, "flash_attention_2")[0]  # noqa: E731
        x = O.dflash2_layer(
            x, attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm,
            (mine.attention_conv.kernel_projection.weight.detach(), mine.attention_conv.base_kernel.detach()),
            (mine.mlp_conv.kernel_projection.weight.detach(), mine.mlp_conv.base_kernel.detach()),
            b, s["conv_group_size"])
    return m.norm(x)


def test_block_states_are_zlab_dflash_with_the_oracle_convolutions():
    torch.manual_seed(7)
    b = T.DRAFT["block"]
    hidden = torch.randn(C + b, 3 * H, dtype=torch.float64)
    tokens = torch.randint(0, 255, (C + b,))
    embed, head = torch.randn(V, H, dtype=torch.float64), torch.randn(V, H, dtype=torch.float64)
    ids = torch.full((b,), T.MASK_ID)
    ids[0] = tokens[C]
    for conv in (False, True):
        d = small_drafter(3, conv)
        with torch.no_grad():
            _, z = d(hidden[None], tokens[None], torch.tensor([C]), embed, head)
            want = zlab_reference(d, hidden[:C], ids, embed)
        err = (z[0, 0] - want).abs().max() / want.abs().max()
        assert err < 1e-4, (conv, err)
        if conv:  # the planted change: the same weights with identity convolutions differ
            plain = zlab_reference(small_drafter(3, False), hidden[:C], ids, embed)
            assert (plain - want).abs().max() / want.abs().max() > 100 * err


def test_selector_objective_is_speculators_by_direct_sums():
    torch.manual_seed(11)
    s = T.DRAFT
    k, r = s["selector_top_k"], s["selector_rank"]
    d = small_drafter(5, True).float()
    sel = d.candidate_selector
    with torch.no_grad():
        for p in (sel.predecessor_codebook, sel.successor_codebook, sel.hidden_projection.weight):
            p.normal_()
    logits, z = torch.randn(2, 3, V) * 4, torch.randn(2, 3, H)
    target = logits.argsort(-1, descending=True)[..., 0].clone()
    target[0, 1] = logits[0, 1].argsort()[0]  # absent from the top-k: injected at rank k
    target[1, 2] = logits[1, 2].argsort(descending=True)[3]  # present at rank 4
    prev = torch.randint(0, V, (2, 3))
    ids, slot, contains = T.selector_candidates(logits, target, k)
    scores = T.teacher_forced_scores(sel, logits, z, ids, prev)
    cap, mult = s["final_logit_softcapping"], s["output_multiplier"]
    A, Cb, W = (t.detach().double() for t in (sel.predecessor_codebook, sel.successor_codebook, sel.hidden_projection.weight))
    for i in range(2):
        for j in range(3):
            top = sorted(range(V), key=lambda v: (-float(logits[i, j, v]), v))[:k]
            if int(target[i, j]) not in top:
                top[-1] = int(target[i, j])
            assert ids[i, j].tolist() == top
            assert int(slot[i, j]) == top.index(int(target[i, j]))
            assert bool(contains[i, j]) == ((i, j) != (0, 1))
            gate = W @ z[i, j].double()
            for c, v in enumerate(top):
                u = float(logits[i, j, v]) * mult
                u = cap * torch.tanh(torch.tensor(u / cap, dtype=torch.float64)).item()
                pair = sum(float(A[int(prev[i, j]), q] * gate[q] * Cb[v, q]) for q in range(r))
                assert abs(float(scores[i, j, c].detach()) - (u + pair)) < 1e-3 * (1 + abs(u + pair))
    assert int(slot[1, 2]) == 3 and int(slot[0, 1]) == k - 1


def test_saved_config_reads_in_qwen3config():
    target = Qwen3Config(hidden_size=H, vocab_size=V, num_hidden_layers=6, max_position_embeddings=4096)
    raw = T.zlab_config(target, "x")
    cfg = Qwen3Config(**{k: v for k, v in raw.items() if k != "transformers_version"})
    assert cfg.sliding_window == T.DRAFT["window"] and cfg.layer_types == ["sliding_attention"] * T.DRAFT["layers"]
    assert cfg.rope_parameters["rope_theta"] == T.DRAFT["rope_theta"] and cfg.head_dim == T.DRAFT["head_dim"]
    assert cfg.dflash_config["block_size"] == T.DRAFT["block"] and raw["is_causal"] is False


def test_loads_the_host_module_without_pydantic():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('pydantic', 'omegaconf', 'hydra', 'yaml', 're2'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"sys.path.insert(0, {str(ROOT / 'bench')!r})\n"
        "import train_tiny_dflash2 as T\n"
        "assert T.D2.__file__.endswith('framework/runtime/dflash2.py'), T.D2.__file__\n"
        "T.DFlash2Drafter(128, 256, T.DRAFT)\n"
        "print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]


def test_selector_loss_is_speculators_own():
    """The objective against vllm-project/speculators' own functions (installed):
    ``DFlash2DraftModel._predecessor_ids`` (``sample_from_anchor`` false),
    ``selector_training_candidates``, ``CandidateSelector.score_candidates`` and
    ``compute_selector_loss`` (``fixed-exp-decay``, gamma 4) on the same weights, with the
    identity unary transform (speculators scores raw logits). The loss is speculators' times
    ``B / sum(decay)`` (weights normalised to sum 1 here); its gradient in the logits and the
    hidden states is the same up to that factor."""
    M = pytest.importorskip("speculators.models.dflash2.metrics")
    from types import SimpleNamespace

    from speculators.models.dflash2.core import DFlash2DraftModel
    from speculators.models.dflash2.model_definitions import CandidateSelector

    torch.manual_seed(13)
    s = {**T.DRAFT, "final_logit_softcapping": None}
    b, k, gamma, a, t = s["block"], s["selector_top_k"], s["gamma"], 5, 64
    d = T.DFlash2Drafter(H, V, s)
    tokens = torch.randint(0, 255, (1, t))
    anchors = torch.tensor([3, 11, 20, 30, 41])
    full_logits = (torch.randn(1, a * b, V) * 3).requires_grad_()
    full_z = torch.randn(1, a * b, H).requires_grad_()
    full_target = torch.randint(0, V, (1, a * b))
    full_target[0, 1::3] = full_logits[0, 1::3].detach().argmax(-1)  # some targets among the top-k

    theirs = CandidateSelector(vocab_size=V, hidden_size=H, rank=s["selector_rank"], top_k=k)
    theirs.load_state_dict({n: p.detach() for n, p in d.candidate_selector.state_dict().items()})
    block_idx = (anchors[:, None] + torch.arange(b)).reshape(-1)
    pred = DFlash2DraftModel._predecessor_ids(
        SimpleNamespace(block_size=b, config=SimpleNamespace(sample_from_anchor=False)), tokens, block_idx)
    cand, pos, _ = M.selector_training_candidates(full_logits.detach().topk(k, dim=-1).indices, full_target)
    spec_scores = theirs.score_candidates(full_logits, full_z, pred.reshape(1, -1), cand)
    spec = M.compute_selector_loss(spec_scores, pos, torch.ones(1, a * b), b, gamma=gamma,
                                   per_position_loss_weight="fixed-exp-decay", dpace_alpha=0.5,
                                   sample_from_anchor=False)
    g_spec = torch.autograd.grad(spec, (full_logits, full_z))

    drafted = lambda x: x.view(1, a, b, *x.shape[2:])[:, :, 1:]  # noqa: E731  (slots 1..B-1)
    prev = tokens[:, T.drafted_positions(anchors, b)]  # what the trainer feeds as predecessors
    w = T.slot_weights(b, gamma, "cpu")
    mine, ids, scores, _ = T.selector_loss(d.candidate_selector, drafted(full_logits), drafted(full_z),
                                           drafted(full_target), prev, w)
    g_mine = torch.autograd.grad(mine, (full_logits, full_z))
    assert torch.equal(prev, drafted(pred.view(1, -1)))
    assert torch.equal(ids, drafted(cand))
    torch.testing.assert_close(scores, drafted(spec_scores.detach()), rtol=1e-5, atol=1e-5)
    decay_sum = sum(math.exp(-j / gamma) for j in range(b - 1))
    factor = b / decay_sum
    assert abs(mine.item() - factor * spec.item()) < 1e-4 * abs(mine.item())
    for gm, gs in zip(g_mine, g_spec):
        torch.testing.assert_close(gm, factor * gs, rtol=1e-4, atol=1e-7)
        assert gm.view(1, a, b, -1)[:, :, 0].abs().max() == 0  # the anchor slot gets no gradient
