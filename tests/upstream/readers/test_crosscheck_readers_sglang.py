"""SGLang 0.5.23's own config and model-setup code (readers_sglang.py) on every adapter's
export to every export target: what SGLang would run (per-layer causality and window, norm
styles, RoPE, mask token, target layers, fc width, block size, where each tensor loads)
equals draftsmith's record of the source, or the export is refused in one line. SGLang
registers no speculators-format model: those exports are skipped naming that. Skipped (one
line) without the wheel's extracted files (``.ci/run`` provides them)."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("transformers", reason="the crosscheck extra (transformers==5.19.0) is not installed")

from draftsmith.framework.convert.export import export, resolve_target
from draftsmith.framework.spec.loading import adapter_files
from readers import check_export, planted, trtllm_dflash_source, SGLANG, differences, export_targets, ours

import readers_sglang

EXPORT_TARGETS = export_targets()  # once: each call compiles every adapter
PAIRS = [(a, t) for a in sorted(adapter_files()) for t in EXPORT_TARGETS]


@pytest.mark.parametrize("source,to", PAIRS)
def test_sglang_runs_what_the_record_says(checkpoints, tmp_path, source, to):
    check_export(checkpoints, source, to, SGLANG, readers_sglang.read, "SGLang")


@pytest.fixture(scope="module")
def zlab_export(tmp_path_factory):
    """trtllm_dflash (a non-causal window and a full layer) exported to z-lab's format."""
    a, src, r = trtllm_dflash_source(tmp_path_factory, SGLANG)
    root = src.parent
    return export(a, src, root / "x", "zlab_dflash"), r, resolve_target("zlab_dflash", r)


PLANTS = {  # edit of the exported config -> the key the comparison must name
    "is_causal": (lambda c: c.update(is_causal=True), "layers"),
    "is_causal_absent": (lambda c: c.pop("is_causal"), "layers"),  # SGLang's default: sliding layers causal
    "window": (lambda c: c.update(sliding_window=5), "layers"),
    "use_gemma_norm": (lambda c: c.update(use_gemma_norm=True), "norms"),
    "rope_theta": (lambda c: c.update(rope_theta=5e5), "rope"),
    "rope_type": (lambda c: c.update(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                      "rope_theta": c["rope_theta"]}), "rope"),
    "partial_rotary": (lambda c: c.update(partial_rotary_factor=0.5), "rope"),
    "mask_token_id": (lambda c: c["dflash_config"].update(mask_token_id=7), "mask_token_id"),
    "target_layer_ids": (lambda c: c["dflash_config"].update(target_layer_ids=[0, 2, 4]), "target_layer_ids"),
    "block_size": (lambda c: c.update(block_size=8), "block_size"),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_sglang_comparison_notices(zlab_export, tmp_path, plant):
    folder, r, target = zlab_export
    edit, key = PLANTS[plant]
    assert differences(readers_sglang.read(folder), ours(r, target), "SGLang") == []
    found = differences(readers_sglang.read(planted(tmp_path, folder, edit)), ours(r, target), "SGLang")
    assert any(f"SGLang: {key}:" in line for line in found), found


def test_sglang_weight_comparison_notices(zlab_export, tmp_path):
    """A tensor renamed in the export is one DFlashDraftModel.load_weights ignores."""
    from safetensors.torch import load_file, save_file

    folder, r, target = zlab_export
    d = planted(tmp_path, folder, lambda c: None)
    for f in d.glob("*.safetensors"):
        w = load_file(f)
        if "norm.weight" in w:
            w["final_norm.weight"] = w.pop("norm.weight")
        save_file(w, f)
    found = differences(readers_sglang.read(d), ours(r, target), "SGLang")
    assert any("final_norm.weight load into nothing" in line for line in found), found


def test_sglang_alias_class_reads_the_same(zlab_export, tmp_path):
    """MuseGlimmerAssistantModel (dflash.py's alias of DFlashDraftModel) builds the same model,
    so an adapter exporting that architecture is compared too; an architecture SGLang does not
    register is named in one line."""
    from readers import NotRead

    folder, r, target = zlab_export
    alias = planted(tmp_path, folder, lambda c: c.update(architectures=["MuseGlimmerAssistantModel"]))
    assert differences(readers_sglang.read(alias), ours(r, target), "SGLang") == []
    shutil.rmtree(alias)
    other = planted(tmp_path, folder, lambda c: c.update(architectures=["NoSuchDraftModel"]))
    with pytest.raises(NotRead, match=r"^sglang==0.5.23 registers no model NoSuchDraftModel"):
        readers_sglang.read(other)


def test_sglang_gemma_norms_of_a_plain_drafters_export_scale_by_its_weights(checkpoints):
    """A plain-norm drafter (meta_muse_glimmer: ``rms(x) * w``) exported to the MiniMax DSpark format,
    which SGLang builds with ``GemmaRMSNorm`` for every norm when ``use_gemma_norm`` (srt/models/
    dspark_minimax.py ``MiniMaxDraftBackbone.__init__`` for ``norm`` / ``hidden_norm``; minimax_m3.py
    ``MiniMaxM3DecoderLayer`` for ``input_layernorm`` / ``post_attention_layernorm`` and, with
    ``qk_norm_type: per_head``, ``q_norm`` / ``k_norm``). Each exported norm weight is loaded through
    SGLang's own ``GemmaRMSNorm`` (its ``weight_loader``) and run by its ``forward_native``
    (srt/layers/layernorm.py, ``x * (1 + w)``): the output must be the source's ``rms(x) * w`` in
    float64. This crosscheck does not build SGLang's DSpark MiniMax model (the reader skips the pair),
    so the norms are run here one class at a time."""
    from typing import Optional, Tuple, Union

    import torch
    from safetensors.torch import load_file
    from torch import nn

    from readers import defs, exported, src_root

    root = src_root(SGLANG)
    folder, r, _ = exported(checkpoints, "meta_muse_glimmer", "minimax_dspark")
    assert set(r.norms.values()) == {"plain"}, r.norms  # the restyle under test: plain -> Gemma
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config", config)
    assert text["use_gemma_norm"] is True and text["qk_norm_type"] == "per_head", text
    gemma = defs(root / "sglang/srt/layers/layernorm.py", ["GemmaRMSNorm"],
                 {"BaseFusedOp": nn.Module, "torch": torch, "nn": nn, "Optional": Optional, "Union": Union,
                  "Tuple": Tuple})["GemmaRMSNorm"]
    source = {}
    for f in checkpoints("meta_muse_glimmer").converted.glob("*.safetensors"):
        source.update(load_file(str(f)))
    exported_tensors = {}
    for f in folder.glob("*.safetensors"):
        exported_tensors.update(load_file(str(f)))
    g = torch.Generator().manual_seed(torch.seed() % 2**31)
    checked = []
    for name, w in exported_tensors.items():
        # SGLang's load_weights: prefix off, final_norm -> norm; the layer wrapper's decoder_layer off
        ours = name.removeprefix("language_model.model.dspark.").replace("final_norm", "norm").replace(
            ".decoder_layer.", ".")
        if not ours.endswith("norm.weight"):
            continue
        norm = gemma(w.shape[0], eps=text["rms_norm_eps"])
        norm.weight.data.fill_(float("nan"))
        norm.weight.weight_loader(norm.weight, w)
        x = torch.randn(5, w.shape[0], generator=g)
        got = norm.forward_native(x)
        xd = x.double()
        want = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + text["rms_norm_eps"]) * source[ours].double()
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-3, msg=lambda m: f"{name}: {m}")
        checked.append(ours)
    kinds = {n.split(".")[-2] for n in checked}
    assert kinds == {"input_layernorm", "post_attention_layernorm", "q_norm", "k_norm", "norm", "hidden_norm"}, kinds
