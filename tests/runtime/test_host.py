"""The PyTorch reference host against an independent float64 implementation of section 1
of the drafter reference (``ref_draft``, from ``oracles.py``, calls no host module).

Checkpoints are built by hand in the DFlash target layout at tiny dims, random weights.
"""

from __future__ import annotations

import json

import pytest
import torch

from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.errors import UserError
from draftsmith.framework.runtime import DFlashDraftModel, get_host
from draftsmith.framework.runtime.loading import build_drafter
from support.helpers import fake_target
from support.host_case import (BLOCK, LAYERS, TABLE, TGT_H, TGT_LAYERS, VOCAB, W, assert_matches, build, make_config,
                               make_target, make_weights, rand_hidden, ref_draft, write_checkpoint)
from support.interp import interpreter_suite

_child_results, interp_test = interpreter_suite(__file__)

# ---- tests --------------------------------------------------------------------------------------

VARIANTS = [
    dict(gemma=True, act="swigluoai", sfa=True),
    dict(gemma=False, act="silu", sfa=True),
    dict(gemma=True, act="silu", sfa=False),
    dict(gemma=False, act="swigluoai", sfa=False, conf_markov=False),
    dict(gemma=True, act="swigluoai", sfa=True, rank=0, conf=False, conf_markov=False),
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}={v[k]}" for k in v))
@pytest.mark.parametrize("ctx", [3, 20])
def test_draft_step_matches_reference(variant, ctx):
    config = make_config(**variant)
    weights, target = make_weights(config, seed=ctx), make_target()
    model = build(config, weights, target)
    cache = model.make_cache(1, page_size=4, max_context=64)
    hidden = rand_hidden(ctx, seed=7)
    model.append_context(cache, hidden)
    anchor = 11
    out = model.draft(torch.tensor([anchor]), cache)
    k = BLOCK if variant["sfa"] else BLOCK - 1
    assert out.tokens.shape == (1, k) and out.logits.shape == (1, k, VOCAB)
    ref = ref_draft(config, weights, target, hidden, anchor)
    assert_matches(out.logits[0], out.tokens[0], None if out.confidence is None else out.confidence[0], ref)


def test_plain_dflash_config():
    config = make_config(sfa=False, rank=0, conf=False, conf_markov=False)
    del config["dspark_config"]
    weights, target = make_weights(config), make_target()
    assert not any(k.startswith(("markov", "confidence")) for k in weights)
    model = build(config, weights, target)
    assert model.cfg.max_draft_len == BLOCK - 1 and model.markov_head is None
    cache = model.make_cache(1, max_context=32)
    h = rand_hidden(9, seed=9)
    model.append_context(cache, h)
    out = model.draft(torch.tensor([2]), cache)
    assert out.confidence is None
    assert_matches(out.logits[0], out.tokens[0], None, ref_draft(config, weights, target, h, 2))


@pytest.mark.parametrize("lowering", ["dense", "window_decode_merge"])
def test_lowerings_through_host(lowering):
    config = make_config()
    weights, target = make_weights(config), make_target()
    model = build(config, weights, target, lowering=lowering)
    assert model.layer_lowerings == [lowering] * 3
    cache = model.make_cache(1, page_size=16, max_context=64)
    hidden = rand_hidden(17, seed=3)
    model.append_context(cache, hidden)
    out = model.draft(torch.tensor([5]), cache)
    assert_matches(out.logits[0], out.tokens[0], out.confidence[0], ref_draft(config, weights, target, hidden, 5))


def check_triton_host() -> None:
    """Host + ``triton_window_block`` against the oracle (run under ``TRITON_INTERPRET=1``)."""
    config = make_config()
    weights, target = make_weights(config), make_target()
    model = build(config, weights, target, lowering="triton_window_block")
    lens, anchors = [3, 20, 9], [1, 2, 3]
    cache = model.make_cache(len(lens), page_size=4, max_context=64)
    hs = [rand_hidden(c, seed=c) for c in lens]
    for n, h in enumerate(hs):
        model.append_context(cache, h, seq=n)
    out = model.draft(torch.tensor(anchors), cache)
    for n, (h, a) in enumerate(zip(hs, anchors)):
        assert_matches(out.logits[n], out.tokens[n], out.confidence[n], ref_draft(config, weights, target, h, a))


@interp_test
def test_interp_triton_lowering_through_host():
    """The interpreter must be on before Triton is imported: run in the interpreter child of
    ``support.interp`` (forked with torch already imported, not a fresh interpreter)."""
    pytest.importorskip("triton")
    check_triton_host()


def test_mixed_batch_matches_per_sequence():
    config = make_config()
    weights, target = make_weights(config), make_target()
    model = build(config, weights, target)
    lens, anchors = [3, 20, 9, 1, 0], [4, 50, 96, 0, 7]
    hiddens = [rand_hidden(c, seed=c) for c in lens]
    cache = model.make_cache(len(lens), page_size=4, max_context=32)
    for n, h in enumerate(hiddens):
        model.append_context(cache, h, seq=n)
    out = model.draft(torch.tensor(anchors), cache)
    for n, (h, a) in enumerate(zip(hiddens, anchors)):
        one = model.make_cache(1, page_size=16, max_context=32)
        model.append_context(one, h)
        single = model.draft(torch.tensor([a]), one)
        torch.testing.assert_close(out.logits[n], single.logits[0], rtol=1e-5, atol=1e-5)
        assert out.tokens[n].tolist() == single.tokens[0].tolist()
        assert_matches(out.logits[n], out.tokens[n], out.confidence[n], ref_draft(config, weights, target, h, a))


def test_chunked_appends_equal_one_append():
    config = make_config()
    weights, target = make_weights(config), make_target()
    model = build(config, weights, target)
    h = rand_hidden(41, seed=2)
    one = model.make_cache(1, page_size=4, max_context=64)
    model.append_context(one, h)
    many = model.make_cache(1, page_size=4, max_context=64)
    for a, b in [(0, 7), (7, 9), (9, 10), (10, 33), (33, 41)]:
        model.append_context(many, h[a:b], chunk=3)
    x, y = model.draft(torch.tensor([9]), one), model.draft(torch.tensor([9]), many)
    torch.testing.assert_close(x.logits, y.logits, rtol=1e-5, atol=1e-5)


def test_attention_mask_args():
    model = DFlashDraftModel(ResolvedDrafter.from_config(make_config()), dtype=torch.float32)
    assert model._get_attention_mask_args(0) == (False, (W - 1, W - 1))
    assert model._get_attention_mask_args(1) == (False, (-1, -1))
    assert model._get_attention_mask_args(2) == (True, (W - 1, 0))


def test_lowering_choice_and_errors():
    config = make_config()
    assert DFlashDraftModel(ResolvedDrafter.from_config(config), dtype=torch.float32).layer_lowerings == ["dense"] * 3
    with pytest.raises(UserError, match="unknown lowering 'nope'; known"):
        DFlashDraftModel(ResolvedDrafter.from_config(config), dtype=torch.float32, lowering="nope")
    with pytest.raises(UserError, match="trtllm_gen does not run on cpu"):
        DFlashDraftModel(ResolvedDrafter.from_config(config), dtype=torch.float32, lowering="trtllm_gen")
    no_cpu = {k: v for k, v in TABLE.items() if k != "cpu"}
    bad = make_config(tables=[TABLE, no_cpu, TABLE])
    with pytest.raises(UserError, match=r"layer 1 \(full\): no lowering for device class cpu"):
        DFlashDraftModel(ResolvedDrafter.from_config(bad), dtype=torch.float32)


def test_load_weights_strict_and_mapper():
    config = make_config()
    weights = make_weights(config)
    model = DFlashDraftModel(ResolvedDrafter.from_config(config), dtype=torch.float32)
    partial = dict(weights)
    partial.pop("norm.weight")
    partial["extra.weight"] = torch.ones(1)
    with pytest.raises(ValueError, match="missing.*norm.weight.*unexpected.*extra.weight"):
        model.load_weights(partial)
    prefixed = {"language_model.model.dspark." + k: v for k, v in weights.items()}
    model.load_weights(prefixed, weight_mapper=lambda n: n.removeprefix("language_model.model.dspark."))
    assert torch.equal(model.fc.weight, weights["fc.weight"])
    assert "embed_tokens.weight" not in dict(model.named_parameters())


@pytest.mark.parametrize("shards", [1, 3])
def test_build_from_checkpoint_dirs(tmp_path, shards):
    config = make_config(gemma=False, act="silu")
    weights, target = make_weights(config), make_target()
    ck, tg = write_checkpoint(tmp_path, config, weights, target, shards=shards)
    model, _ = build_drafter(get_host("torch").model_cls, ck, tg, dtype=torch.float32)
    cache = model.make_cache(1, max_context=16)
    h = rand_hidden(10, seed=1)
    model.append_context(cache, h)
    out = model.draft(torch.tensor([3]), cache)
    assert_matches(out.logits[0], out.tokens[0], out.confidence[0], ref_draft(config, weights, target, h, 3))


def test_get_host_unknown():
    with pytest.raises(KeyError, match="known: torch"):
        get_host("nope")


def test_bf16_host_close_to_reference():
    config = make_config()
    weights, target = make_weights(config), make_target()
    model = DFlashDraftModel(ResolvedDrafter.from_config(config), dtype=torch.bfloat16)
    model.load_weights(weights)
    tm = build(config, weights, target)  # borrow fp32 target pieces; the host casts them to bf16
    model.load_weights_from_target_model(fake_target(tm.embed_tokens.weight, tm.lm_head.weight))
    assert model.lm_head.weight.dtype == torch.bfloat16 and tm.lm_head.weight.dtype == torch.float32
    cache = model.make_cache(1, max_context=16)
    h = rand_hidden(12, seed=4)
    model.append_context(cache, h)
    out = model.draft(torch.tensor([8]), cache)
    _, logits, _ = ref_draft(config, weights, target, h, 8)
    rel = (out.logits[0, 0].double() - logits[0]).abs().max() / logits[0].abs().max()
    assert rel < 0.1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_replay_matches_eager():
    from draftsmith.framework.runtime.graphs import DraftStepGraph

    config = make_config(tables=[dict(TABLE, sm100="triton_window_block")] * len(LAYERS))
    weights, target = make_weights(config), make_target()
    model = DFlashDraftModel(ResolvedDrafter.from_config(config), device="cuda", dtype=torch.float32)
    model.load_weights(weights)
    tm = build(config, weights, target)
    model.load_weights_from_target_model(fake_target(tm.embed_tokens.weight, tm.lm_head.weight))
    lens = [3, 20, 9]
    cache = model.make_cache(len(lens), page_size=16, max_context=64)
    hs = [rand_hidden(c, seed=c) for c in lens]
    for n, h in enumerate(hs):
        model.append_context(cache, h, seq=n)
    graph = DraftStepGraph(model, cache)
    anchors = torch.tensor([1, 2, 3])
    eager = model.draft(anchors, cache)
    replay = graph.replay(anchors)
    torch.testing.assert_close(replay.logits, eager.logits)
    assert torch.equal(replay.tokens, eager.tokens)
    # new anchors and one more context token per sequence: the same graph, new values
    for n in range(len(lens)):
        model.append_context(cache, rand_hidden(1, seed=100 + n), seq=n)
    anchors = torch.tensor([7, 8, 9])
    torch.testing.assert_close(graph.replay(anchors).logits, model.draft(anchors, cache).logits)


# ---- the draft library function -----------------------------------------------------------------


@pytest.mark.parametrize("sfa", [True, False])
def test_run_draft_dump_matches_reference(tmp_path, sfa):
    from safetensors.torch import load_file

    from draftsmith.framework.runtime.draft import format_report, report_json, run_draft

    config = make_config(sfa=sfa)
    weights, target = make_weights(config), make_target()
    ck, tg = write_checkpoint(tmp_path, config, weights, target, shards=2)
    dump = tmp_path / "step.safetensors"
    rep = run_draft(ck, tg, context=23, seed=5, batch=3, dump=dump)
    k = BLOCK if sfa else BLOCK - 1
    assert rep.tokens.shape == (3, k) and rep.logits.shape == (3, k, VOCAB) and rep.confidence.shape == (3, k)
    assert [l["lowering"] for l in rep.layers] == ["dense"] * 3 and rep.time_ms > 0
    d = load_file(str(dump))
    assert d["inputs.target_hidden"].shape == (23, len(TGT_LAYERS) * TGT_H) and d["inputs.anchor"].shape == (1,)
    assert torch.equal(d["target.lm_head"], target["lm_head.weight"])
    ref = ref_draft(config, weights, target, d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    assert_matches(d["outputs.logits"], d["outputs.tokens"], d["outputs.confidence"], ref)
    # without a dump, invisible context rows are never generated: same answer
    again = run_draft(ck, tg, context=23, seed=5, batch=3)
    assert torch.equal(again.tokens, rep.tokens)
    torch.testing.assert_close(again.logits, rep.logits)
    js = json.loads(report_json(rep))
    assert js["tokens"] == rep.tokens.tolist() and js["logits_shape"] == [3, k, VOCAB]
    table = format_report(rep)
    assert "window 6, non-causal" in table and "full, non-causal" in table and "dense" in table


def test_run_draft_windowed_only_long_context(tmp_path):
    from draftsmith.framework.runtime.draft import context_rows, run_draft

    config = make_config(layers=[(False, W), (True, W)])
    weights, target = make_weights(config), make_target()
    ck, tg = write_checkpoint(tmp_path, config, weights, target)
    c = 100_000
    rep = run_draft(ck, tg, context=c, seed=1, lowering="window_decode_merge")
    assert rep.layers[0]["lowering"] == "window_decode_merge"
    tail = context_rows(1, 0, c - 10, c, len(TGT_LAYERS) * TGT_H)
    ref = ref_draft(config, weights, target, tail, rep.anchors[0], ctx_start=c - 10)
    assert_matches(rep.logits[0], rep.tokens[0], rep.confidence[0], ref)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_run_draft_cuda_matches_cpu(tmp_path):
    """run_draft on CUDA (per-layer table: triton_window_block on sm90/sm100) against CPU dense."""
    from draftsmith.framework.runtime.draft import run_draft

    config = make_config(tables=[dict(TABLE, sm100="triton_window_block")] * len(LAYERS))
    weights, target = make_weights(config), make_target()
    ck, tg = write_checkpoint(tmp_path, config, weights, target)
    gpu = run_draft(ck, tg, device="cuda", context=3000, seed=2, batch=3)
    cpu = run_draft(ck, tg, device="cpu", context=3000, seed=2, batch=3)
    assert {l["lowering"] for l in gpu.layers} == {"triton_window_block"}
    rel = (gpu.logits - cpu.logits).abs().max() / cpu.logits.abs().max()
    assert rel < 5e-3 and torch.equal(gpu.tokens, cpu.tokens)  # the kernel may use tf32 dots
