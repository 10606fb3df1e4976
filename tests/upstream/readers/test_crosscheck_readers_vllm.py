"""vLLM 0.33.0's own config and model-setup code (readers_vllm.py) on every adapter's export
to every export target: what vLLM would run (per-layer causality and window, norm styles,
RoPE, mask token, target layers, fc width, draft length, where each tensor loads) equals
draftsmith's record of the source, or the export is refused in one line. Skipped (one line)
without the wheel's extracted files (``.ci/run`` provides them)."""

from __future__ import annotations


import pytest

pytest.importorskip("transformers", reason="the crosscheck extra (transformers==5.19.0) is not installed")

from draftsmith.framework.convert.export import export, resolve_target
from draftsmith.framework.convert.plan import plan
from draftsmith.framework.errors import UserError
from draftsmith.framework.spec.loading import adapter_files
from readers import check_export, planted, trtllm_dflash_source, exported, VLLM, differences, export_targets, ours

import readers_vllm

EXPORT_TARGETS = export_targets()  # once: each call compiles every adapter
PAIRS = [(a, t) for a in sorted(adapter_files()) for t in EXPORT_TARGETS]


@pytest.mark.parametrize("source,to", PAIRS)
def test_vllm_runs_what_the_record_says(checkpoints, tmp_path, source, to):
    theirs = check_export(checkpoints, source, to, VLLM, readers_vllm.read, "vLLM")
    if theirs is not None:
        assert theirs["method"] in ("dflash", "dspark")


@pytest.fixture(scope="module")
def trtllm_exports(tmp_path_factory):
    """trtllm_dflash (a non-causal window and a full layer) exported to both formats."""
    a, src, r = trtllm_dflash_source(tmp_path_factory, VLLM)
    root = src.parent
    out = {}
    for to in ("speculators", "zlab_dflash"):
        out[to] = (export(a, src, root / to, to, verifier="example-org/verifier-8b"), r, resolve_target(to, r))
    return out


PLANTS = {  # (format, edit of the exported config, the key the comparison must name)
    "is_causal": ("zlab_dflash", lambda c: c.update(is_causal=True), "layers"),
    # vLLM's _resolve_layer_attention takes dflash_config.swa_window_size before sliding_window
    "window": ("zlab_dflash", lambda c: c["dflash_config"].update(swa_window_size=5), "layers"),
    "sliding_window_non_causal": ("speculators", lambda c: c.update(sliding_window_non_causal=False), "layers"),
    "rope_theta": ("zlab_dflash", lambda c: c.update(rope_theta=5e5), "rope"),
    "rope_type": ("zlab_dflash", lambda c: c.update(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                                     "rope_theta": c["rope_theta"]}), "rope"),
    "partial_rotary": ("speculators", lambda c: c["transformer_layer_config"].update(partial_rotary_factor=0.5), "rope"),
    "mask_token_id": ("zlab_dflash", lambda c: c["dflash_config"].update(mask_token_id=7), "mask_token_id"),
    "target_layer_ids": ("speculators", lambda c: c.update(aux_hidden_state_layer_ids=[1, 3, 5]), "target_layer_ids"),
    "speculative_tokens": ("speculators",
                           lambda c: c["speculators_config"]["proposal_methods"][0].update(speculative_tokens=3),
                           "draft_tokens"),
    "sample_from_anchor": ("speculators", lambda c: c.update(sample_from_anchor=True), "sample_from_anchor"),
    # vLLM serves a speculators checkpoint with its verifier: a hub id, never a local path
    "verifier": ("speculators", lambda c: c["speculators_config"]["verifier"].update(name_or_path="/tmp"), "serves"),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_vllm_comparison_notices(trtllm_exports, tmp_path, plant):
    to, edit, key = PLANTS[plant]
    folder, r, target = trtllm_exports[to]
    assert differences(readers_vllm.read(folder), ours(r, target), "vLLM") == []
    found = differences(readers_vllm.read(planted(tmp_path, folder, edit)), ours(r, target), "vLLM")
    assert any(f"vLLM: {key}:" in line for line in found), found


def test_vllm_norm_and_weight_comparisons_notice(trtllm_exports, tmp_path):
    """vLLM's DFlash layers only run plain RMSNorm: a record asking for Gemma norms differs;
    a tensor renamed in the export loads into nothing."""
    folder, r, target = trtllm_exports["zlab_dflash"]
    want = ours(r, target)
    want["norms"] = dict(want["norms"], q_norm="gemma")
    assert any("vLLM: norms:" in line for line in differences(readers_vllm.read(folder), want, "vLLM"))
    from safetensors.torch import load_file, save_file
    d = planted(tmp_path, folder, lambda c: None)
    for f in d.glob("*.safetensors"):
        w = load_file(f)
        if "hidden_norm.weight" in w:
            w["hidden_nrm.weight"] = w.pop("hidden_norm.weight")
        save_file(w, f)
    found = differences(readers_vllm.read(d), ours(r, target), "vLLM")
    assert any("hidden_nrm.weight load into nothing" in line for line in found), found


def test_mixed_causality_refused_for_vllm(checkpoints, tmp_path):
    """speculators_dflash's own tiny drafter (a causal window, a bidirectional full layer): vLLM's
    update_dflash turns sliding_window_non_causal into one dflash_config.causal for every layer,
    so the speculators export is refused in one line; with the refusal lifted the export is
    what vLLM runs wrong."""
    with pytest.raises(UserError, match=r"differing causality.*mixed_causality\)$") as e:
        exported(checkpoints, "speculators_dflash", "speculators")
    assert len(e.value.args) == 1
    d = tmp_path / "adapters"
    d.mkdir()
    for name, f in adapter_files().items():
        (d / f.name).write_text(f.read_text().replace(", mixed_causality]", "]"))
    ck = checkpoints("speculators_dflash")
    r = plan(ck.adapter, ck.source).resolved
    out = export(ck.adapter, ck.source, tmp_path / "x", "speculators", adapter_dir=d, verifier="example-org/v")
    found = differences(readers_vllm.read(out), ours(r, resolve_target("speculators", r, d)), "vLLM")
    assert found == ["vLLM: layers: runs [(True, 8), (True, None)], draftsmith's record says [(True, 8), (False, None)]"]
