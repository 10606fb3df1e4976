"""Issue 45 point 3: every adapter's lowering table, through the emitted forward (the block decode
per rank, ``framework/emit/forward.py``) inside the conformance suite's ``tensorrt_llm`` shim,
captured in a CUDA graph and replayed with a padded row and new values, against the float64 oracle.

The drafter is test_host's tiny one (windowed non-causal, full non-causal and windowed causal
layers); each adapter contributes its ``attention.lowering`` table, so each layer runs the lowering
that adapter maps to this GPU's device class (asserted).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
import yaml

from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.lowering.base import device_class
from test_emit_runtime import ARCH, build_drafter, decode_inputs, emit_package, oracle_block_decode, random_weights
from support.trtllm_shim import fake_trtllm  # noqa: F401  (fixture)
from support.host_case import BLOCK, LAYERS, make_config

ADAPTERS = {p.stem: p for p in sorted((Path(__file__).resolve().parents[2] / "adapters").glob("*.yaml"))}


def lowering_table(name: str) -> dict:
    """The adapter's ``attention.lowering`` (``{windowed: {device: lowering}, full: {...}}``), following
    ``extends`` where the adapter inherits it."""
    spec = yaml.safe_load(ADAPTERS[name].read_text())
    table = (spec.get("attention") or {}).get("lowering")
    if table is None and spec.get("extends"):
        return lowering_table(Path(spec["extends"]).stem)
    return table


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_gpu_every_adapter_forward_captures_and_replays_against_the_oracle(adapter, tmp_path, fake_trtllm,  # noqa: F811
                                                                           monkeypatch):
    capture_and_replay(adapter, tmp_path, fake_trtllm, monkeypatch, "cuda", torch.cuda.CUDAGraph, torch.cuda.graph)


def capture_and_replay(adapter, tmp_path, ns, monkeypatch, device, graph_cls, graph_ctx):
    """The test's body; ``device``/``graph_cls``/``graph_ctx`` are CUDA's; ``graph_cls=None`` runs the
    forward eagerly where the graph would replay (the CPU check of this plumbing below)."""
    table = lowering_table(adapter)
    assert table, f"{adapter}: no attention.lowering table found"
    dev = device_class(device)
    layer_tables = [table["windowed" if w is not None else "full"] for _, w in LAYERS]
    config = dict(make_config(tables=layer_tables), architectures=[ARCH], model_type="tiny_draft")
    res = emit_package(tmp_path, config, package=f"draftsmith_capture_{adapter}")
    monkeypatch.syspath_prepend(str(res.package_dir.parent))
    importlib.import_module(res.package)
    try:
        model = build_drafter(ns, config).to(device)
        w = random_weights()
        model.draft_model_full.load_weights(w, allow_partial_loading=True)
        noise, pos, ctx, kc, vc, slots = (t.to(device) for t in decode_inputs(capacity=160))
        s_noise = torch.cat([noise, noise[:1]])  # a third, padded row (TensorRT-LLM: the scratch slot, no context)
        s_pos = torch.cat([pos, torch.arange(BLOCK, device=device)])
        s_ctx, s_slots = torch.cat([ctx, ctx[:1] * 0]), torch.cat([slots, slots[:1] * 0 + 3])
        model.dflash_forward(s_noise, s_pos, s_ctx, kc, vc, s_slots)  # warm-up: buffers and kernels built
        decode = vars(model)["_draftsmith_decode"]
        assert [f.__name__ for f in decode.fns] == [t[dev] for t in layer_tables], adapter
        if graph_cls is not None:
            graph = graph_cls()
            with graph_ctx(graph):
                static_out = model.dflash_forward(s_noise, s_pos, s_ctx, kc, vc, s_slots)
        g = torch.Generator(device=device).manual_seed(11)
        s_noise.copy_(torch.randn(s_noise.shape, generator=g, device=device))  # new values, same buffers
        kc.copy_(torch.randn(kc.shape, generator=g, device=device))
        vc.copy_(torch.randn(vc.shape, generator=g, device=device))
        ctx_k = [[kc[s, i, :c].double().cpu() for s, c in zip(slots.tolist(), ctx.tolist())] for i in range(len(LAYERS))]
        ctx_v = [[vc[s, i, :c].double().cpu() for s, c in zip(slots.tolist(), ctx.tolist())] for i in range(len(LAYERS))]
        if graph_cls is not None:
            static_out.fill_(float("nan"))  # poison: the replay must write every row
            graph.replay()
        else:  # the CPU dry run of this test's plumbing (tests/emit/test_emit_capture_every_adapter.py's own check)
            static_out = model.dflash_forward(s_noise, s_pos, s_ctx, kc, vc, s_slots)
        if device == "cuda":
            torch.cuda.synchronize()
        got = static_out.clone()
        want = oracle_block_decode(ResolvedDrafter.from_config(config), w, s_noise[:2].cpu(), pos.view(2, BLOCK).cpu(),
                                   ctx_k, ctx_v)
        torch.testing.assert_close(got[:2 * BLOCK].double().cpu(), want, atol=1e-3, rtol=1e-3)
        assert torch.isfinite(got[2 * BLOCK:]).all()  # the padded row is computed, not NaN
    finally:
        for name in [n for n in sys.modules if n.startswith(res.package)]:
            del sys.modules[name]


@pytest.mark.parametrize("adapter", ["zlab_dflash", "minimax_dspark_v0"])
def test_the_capture_plumbing_on_cpu(adapter, tmp_path, fake_trtllm, monkeypatch):  # noqa: F811
    """The GPU test's inputs, lowering assertion and oracle, run eagerly on CPU (so the GPU run
    checks capture and replay, not this file's plumbing); two adapters, one inherited table."""
    capture_and_replay(adapter, tmp_path, fake_trtllm, monkeypatch, "cpu", None, None)
