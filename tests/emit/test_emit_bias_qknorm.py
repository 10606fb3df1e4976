"""The emitted TensorRT-LLM backbone carries biases (``Linear(bias=...)`` for ``qkv_proj``,
``o_proj``, ``gate_up_proj``, ``down_proj``; the fused loaders take each part's ``bias``) and
leaves out q/k norms a drafter lacks (the attributes absent: ``DFlashForCausalLM.
_build_fused_kv_buffers`` tests ``hasattr(self_attn, "k_norm")``): the emitted block decode,
inside the ``tensorrt_llm`` of tests/emit/test_emit_trtllm_fake.py (TensorRT-LLM's own excerpts and
stand-ins), equals a float64 oracle written here (issue 36 point 5); with the biases dropped
(planted) it is far off."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

from draftsmith.framework.compile.resolved import ResolvedDrafter
from test_emit_runtime import build_drafter, decode_inputs, emit_package, oracle_block_decode, random_weights, tiny_config
from support.trtllm_shim import fake_trtllm  # noqa: F401  (fixture)
from support.host_case import BLOCK, D, HID, HKV, HQ, INTER, LAYERS

VARIANTS = {"biased": dict(attention_bias=True, mlp_bias=True, qk_norm=True),
            "no_qk_norm": dict(attention_bias=False, mlp_bias=False, qk_norm=False),
            "biased_no_qk_norm": dict(attention_bias=True, mlp_bias=True, qk_norm=False)}


def variant_config(v: dict) -> dict:
    config = tiny_config(attention_bias=v["attention_bias"], mlp_bias=v["mlp_bias"])
    config["draftsmith"] = dict(config["draftsmith"], **v)
    return config


def variant_weights(v: dict, seed=0) -> dict:
    w = random_weights(seed)
    g = torch.Generator().manual_seed(seed + 7)
    for i in range(len(LAYERS)):
        p = f"model.layers.{i}."
        if not v["qk_norm"]:
            del w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"]
        biases = ([("self_attn.q_proj", HQ * D), ("self_attn.k_proj", HKV * D), ("self_attn.v_proj", HKV * D),
                   ("self_attn.o_proj", HID)] if v["attention_bias"] else []) + \
                 ([("mlp.gate_proj", INTER), ("mlp.up_proj", INTER), ("mlp.down_proj", HID)] if v["mlp_bias"] else [])
        for name, size in biases:
            w[p + name + ".bias"] = 0.5 * torch.randn(size, generator=g)
    return w


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_emitted_block_decode_matches_the_oracle(tmp_path, fake_trtllm, monkeypatch, name):  # noqa: F811
    v = VARIANTS[name]
    config = variant_config(v)
    res = emit_package(tmp_path, config, package=f"draftsmith_bias_{name}")
    monkeypatch.syspath_prepend(str(res.package_dir.parent))
    importlib.import_module(res.package)
    try:
        model = build_drafter(fake_trtllm, config)
        attn = model.model.layers[0].self_attn
        assert hasattr(attn, "k_norm") == v["qk_norm"] and hasattr(attn, "q_norm") == v["qk_norm"]
        assert (attn.qkv_proj.bias is not None) == v["attention_bias"]
        assert (model.model.layers[0].mlp.down_proj.bias is not None) == v["mlp_bias"]
        w = variant_weights(v)
        model.draft_model_full.load_weights(w, allow_partial_loading=True)
        if v["attention_bias"]:
            assert torch.equal(attn.qkv_proj.bias[:HQ * D], w["model.layers.0.self_attn.q_proj.bias"])
        noise, pos, ctx, kc, vc, slots = decode_inputs()
        ctx_k = [[kc[s, i, :c].clone() for s, c in zip(slots, ctx)] for i in range(len(LAYERS))]
        ctx_v = [[vc[s, i, :c].clone() for s, c in zip(slots, ctx)] for i in range(len(LAYERS))]
        out = model.dflash_forward(noise, pos, ctx, kc, vc, slots)
        r = ResolvedDrafter.from_config(config)
        want = oracle_block_decode(r, w, noise, pos.view(2, BLOCK), ctx_k, ctx_v)
        torch.testing.assert_close(out.double(), want, atol=1e-4, rtol=1e-4)
        if v["attention_bias"]:  # planted: the biases dropped move the output far off
            unbiased = oracle_block_decode(r, {k: t for k, t in w.items() if not k.endswith(".bias")}, noise,
                                     pos.view(2, BLOCK), ctx_k, ctx_v)
            assert (unbiased - want).abs().max() > 0.05 * want.abs().max()
    finally:
        for mod in [n for n in sys.modules if n.startswith(res.package)]:
            del sys.modules[mod]
