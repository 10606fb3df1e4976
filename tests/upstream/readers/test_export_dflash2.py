"""``convert ... to=speculators`` for DFlash 2 drafters: the alias picks the format of the
drafter's family (``speculators_dflash2``), and what that format can express goes through end
to end; what it cannot is refused in one line.

Two sources: a speculators_dflash2 checkpoint, and a z-lab DFlash 2 drafter whose selector
transform is the identity (multiplier 1, no soft cap, embedding scale 1: a hand-edited tiny
synth). Each export is checked against other systems' own code:

1. speculators 0.9.0's ``DFlash2DraftModel.from_pretrained`` loads it, every tensor bit-equal to
   the source's converted one (no transform on this path), its config the source's sizes;
2. draftsmith converts it back and drafts (host, float32, ``dump=``) exactly what the source
   drafts;
3. vLLM 0.33.0's ``SpeculatorsConfig`` (``transformers_utils/configs/speculators/base.py``, running
   ``algos.py`` ``update_dflash2``, from ``.readers-src``) turns it into ``dflash_config``'s four
   DFlash 2 keys with the source's values and ``target_layer_ids`` = aux ids - 1.

Planted errors in an export (a codebook saved as ``.weight``, the aux ids off by one) fail these
checks.
"""

from __future__ import annotations

import json
import re
import shutil
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter, route
from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.framework.convert.synth import synthesize
from draftsmith.framework.runtime.draft import run_draft
from support.helpers import read_checkpoint as read
from readers import VLLM, planted, real_module, src_root

CODEBOOK = "candidate_selector.predecessor_codebook"
NAMES = ("speculators_dflash2", "zlab_identity")
#: tensors speculators' model holds but loads from the verifier, not from the drafter's file
VERIFIER_OWNED = ("embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight", "verifier_norm.weight")


def _zlab_identity(root):
    """A tiny z-lab DFlash 2 drafter whose unary transform and embedding scale are the identity."""
    res = synthesize(load_adapter("zlab_dflash2"), "tiny", root / "source", seed=5)
    path = res.path / "config.json"
    cfg = json.loads(path.read_text())
    cfg["dflash_config"].update(output_multiplier=1.0, final_logit_softcapping=0.0)
    path.write_text(json.dumps(cfg))
    return res.path


@pytest.fixture(scope="module")
def exports(tmp_path_factory, checkpoints):
    """name -> (source folder, its conversion, the source's record, the export, the target folder),
    the export written by ``convert ... to=speculators`` (the CLI)."""
    out = {}
    for name in NAMES:
        root = tmp_path_factory.mktemp(f"export-{name}")
        if name == "zlab_identity":
            adapter, source, converted = "zlab_dflash2", _zlab_identity(root), root / "converted"
            assert main(["convert", f"adapter={adapter}", f"source={source}", f"out={converted}"]) == 0
        else:
            ck = checkpoints(name)
            adapter, source, converted = name, ck.source, ck.converted
        assert main(["convert", f"adapter={adapter}", f"source={source}", f"out={root / 'x'}", "to=speculators",
                     f"verifier={source / 'target'}"]) == 0
        cfg, _ = read(converted)
        out[name] = SimpleNamespace(source=source, converted=converted, record=R.from_config(cfg), x=root / "x",
                                    target=source / "target")
    return out


def test_alias_picks_the_drafters_family(exports):
    for e in exports.values():
        raw = json.loads((e.x / "config.json").read_text())
        assert route(raw).name == "speculators_dflash2"
        assert raw["speculators_model_type"] == "dflash2" and raw["architectures"] == ["DFlash2DraftModel"]
        assert "dflash_config" not in raw and "is_causal" not in json.dumps(raw)


# ---- 1. speculators' own loader -------------------------------------------------------------------


def speculators_check(folder, converted, r) -> None:
    """speculators' ``DFlash2DraftModel.from_pretrained`` on ``folder``: every tensor of the model
    but the verifier's equals ``converted``'s (bit for bit), and its config says record ``r``'s sizes."""
    from speculators.models.dflash2 import DFlash2DraftModel

    m = DFlash2DraftModel.from_pretrained(str(folder), torch_dtype=torch.bfloat16)
    assert type(m) is DFlash2DraftModel
    sd = {k: v for k, v in m.state_dict().items() if k not in VERIFIER_OWNED}
    _, ref = read(converted)
    assert sorted(sd) == sorted(ref)
    for k, t in ref.items():
        assert sd[k].dtype == t.dtype and sd[k].shape == t.shape, k
        assert torch.equal(sd[k].view(torch.uint8), t.view(torch.uint8)), k
    c = m.config
    assert (c.conv_kernel_size, c.conv_group_size) == (r.dflash2.conv.kernel_size, r.dflash2.conv.group_size)
    assert (c.selector_rank, c.selector_top_k) == (r.dflash2.selector.rank, r.dflash2.selector.top_k)
    assert (c.block_size, c.mask_token_id, c.sample_from_anchor) == (r.block_size, r.mask_token_id, False)
    assert c.aux_hidden_state_layer_ids == [i + 1 for i in r.target_layer_ids]  # target layer inputs
    windowed = {m.causal for m in r.masks if m.window is not None}
    assert windowed == {not c.sliding_window_non_causal} or not windowed


@pytest.mark.parametrize("name", NAMES)
def test_speculators_loads_the_export(exports, name):
    pytest.importorskip("speculators", reason="the crosscheck extra (speculators==0.9.0) is not installed")
    e = exports[name]
    speculators_check(e.x, e.converted, e.record)


def _codebook_as_module(folder):
    """The export with the codebook saved under the module spelling (``.weight``)."""
    w = load_file(folder / "model.safetensors")
    w[CODEBOOK + ".weight"] = w.pop(CODEBOOK)
    save_file(w, folder / "model.safetensors")


def test_speculators_check_fails_on_a_planted_codebook_name(exports, tmp_path):
    pytest.importorskip("speculators", reason="the crosscheck extra (speculators==0.9.0) is not installed")
    e = exports["zlab_identity"]
    d = tmp_path / "planted"
    shutil.copytree(e.x, d)
    _codebook_as_module(d)
    with pytest.raises(AssertionError, match="predecessor_codebook"):
        speculators_check(d, e.converted, e.record)


# ---- 2. back through draftsmith ------------------------------------------------------------------


#: record fields naming where the record came from (the adapter and what it ignores), not the drafter
PROVENANCE = {"adapter", "spec_sha256", "writer_ignored", "irrelevant", "sources"}


def _draft(checkpoint, target, dump):
    run_draft(checkpoint, target, context=24, seed=11, dtype="float32", dump=dump, repeats=1)
    return load_file(dump)


@pytest.mark.parametrize("name", NAMES)
def test_converted_back_drafts_like_the_source(exports, name, tmp_path):
    e = exports[name]
    assert main(["convert", "adapter=speculators_dflash2", f"source={e.x}", f"out={tmp_path / 'back'}"]) == 0
    cfg, w = read(tmp_path / "back")
    back = R.from_config(cfg)
    assert cfg["draftsmith"]["adapter"] == "speculators_dflash2"
    assert back.model_dump(exclude=PROVENANCE) == e.record.model_dump(exclude=PROVENANCE)
    _, ref = read(e.converted)
    assert sorted(w) == sorted(ref) and all(torch.equal(w[k], ref[k]) for k in ref)
    ours, theirs = _draft(e.converted, e.target, tmp_path / "a.safetensors"), _draft(tmp_path / "back", e.target,
                                                                                    tmp_path / "b.safetensors")
    for k in ("inputs.target_hidden", "outputs.tokens", "outputs.logits", "outputs.candidates", "outputs.realized"):
        assert torch.equal(ours[k], theirs[k]), k


# ---- 3. vLLM's own reader of the speculators format ----------------------------------------------


def vllm_check(folder, r) -> None:
    """vLLM 0.33.0's ``SpeculatorsConfig.extract_transformers_pre_trained_config`` (``update_dflash2``)
    and ``extract_vllm_speculative_config`` on ``folder``'s config: the DFlash 2 model, the four keys
    with record ``r``'s values, ``target_layer_ids`` = aux ids - 1 = ``r``'s, none of the unary knobs
    (vLLM's qwen3_dflash2 then runs the identity the record has)."""
    import readers_vllm

    base = real_module(src_root(VLLM), "vllm.transformers_utils.configs.speculators.base", [readers_vllm._logger_stub()])
    raw = json.loads((folder / "config.json").read_text())
    pre = base.SpeculatorsConfig.extract_transformers_pre_trained_config(json.loads(json.dumps(raw)))
    spec = base.SpeculatorsConfig.extract_vllm_speculative_config(json.loads(json.dumps(raw)))
    assert spec == {"method": "dflash", "num_speculative_tokens": r.max_draft_len}
    assert pre["architectures"] == ["DFlash2DraftModel"]
    dc = pre["dflash_config"]
    d2 = r.dflash2
    assert {k: dc.get(k) for k in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")} == {
        "conv_kernel_size": d2.conv.kernel_size, "conv_group_size": d2.conv.group_size,
        "selector_rank": d2.selector.rank, "selector_top_k": d2.selector.top_k}
    assert dc["target_layer_ids"] == [i - 1 for i in raw["aux_hidden_state_layer_ids"]]
    assert dc["target_layer_ids"] == list(r.target_layer_ids), (dc["target_layer_ids"], r.target_layer_ids)
    assert pre["eagle_aux_hidden_state_layer_ids"] == raw["aux_hidden_state_layer_ids"]
    assert (dc["mask_token_id"], dc["sample_from_anchor"]) == (r.mask_token_id, r.sample_from_anchor)
    assert {m.causal for m in r.masks} == {dc["causal"]}
    assert not {"output_multiplier", "final_logit_softcapping", "input_embedding_scale"} & set(dc)
    assert (d2.selector.unary.multiplier, d2.selector.unary.softcap, d2.input_embedding_scale) == (1.0, None, 1.0)


@pytest.mark.parametrize("name", NAMES)
def test_vllm_reads_the_export(exports, name):
    e = exports[name]
    vllm_check(e.x, e.record)


@pytest.mark.parametrize("edit", [
    lambda c: c.update(aux_hidden_state_layer_ids=[i - 1 for i in c["aux_hidden_state_layer_ids"]]),  # outputs written
    lambda c: c.update(selector_top_k=c["selector_top_k"] + 1),
    lambda c: c.update(sliding_window_non_causal=False),
], ids=["aux_offset", "top_k", "causality"])
def test_vllm_check_fails_on_a_planted_config(exports, tmp_path, edit):
    src_root(VLLM)
    e = exports["zlab_identity"]
    with pytest.raises(AssertionError):
        vllm_check(planted(tmp_path, e.x, edit), e.record)


# ---- 4. refusals ----------------------------------------------------------------------------------


def _edited(exports, tmp_path, edit):
    """A copy of the identity z-lab source with its config edited by ``edit``."""
    src = tmp_path / "source"
    shutil.copytree(exports["zlab_identity"].source, src)
    path = src / "config.json"
    cfg = json.loads(path.read_text())
    edit(cfg)
    path.write_text(json.dumps(cfg))
    return src


def _without_dflash2_alias(tmp_path):
    """An adapter folder where no format but DFlash 1's is under the ``speculators`` alias."""
    from draftsmith.framework.spec.loading import adapter_files

    d = tmp_path / "adapters"
    d.mkdir()
    for name, path in adapter_files().items():
        text = path.read_text()
        if name == "speculators_dflash2":
            assert text.count("  alias: speculators\n") == 1
            text = text.replace("  alias: speculators\n", "")
        (d / path.name).write_text(text)
    return d


REFUSALS = {  # id -> (config edit, to=, with the alias on DFlash 1 formats only, the one line)
    "multiplier": (lambda c: c["dflash_config"].update(output_multiplier=0.5), "speculators", False,
                   r"^error: to=speculators_dflash2: the speculators_dflash2 format cannot express "
                   r"dflash_config\.output_multiplier: 0\.5 would read back as 1\.0$"),
    "softcap": (lambda c: c["dflash_config"].update(final_logit_softcapping=20.0), "speculators", False,
                r"^error: to=speculators_dflash2: .*dflash_config\.final_logit_softcapping: 20\.0 would read back as 0\.0$"),
    "embedding_scale": (lambda c: c["dflash_config"].update(input_embedding_scale=1.5), "speculators_dflash2", False,
                        r"^error: to=speculators_dflash2: .*dflash_config\.input_embedding_scale: 1\.5 would read back "
                        r"as 1\.0$"),
    "mixed_causality": (lambda c: c.pop("is_causal"), "speculators", False,
                        r"^error: to=speculators_dflash2: .*layers of differing causality \(causal: \[True, False\];"
                        r".*\(export\.unsupported: mixed_causality\)$"),
    "dflash1_named": (lambda c: None, "speculators_dflash", False,
                      r"^error: to=speculators_dflash: the speculators_dflash format cannot express a gqa_dflash2 "
                      r"drafter .*; the format's family is gqa_dflash\)$"),
    "nothing_fits": (lambda c: None, "speculators", True,
                     r"^error: to=speculators: no format under this alias fits a gqa_dflash2 drafter without heads "
                     r"\(speculators_dflash: gqa_dflash without heads; speculators_dspark: gqa_dflash with heads\)$"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refused_in_one_line(exports, tmp_path, capsys, case):
    edit, to, dflash1_only, line = REFUSALS[case]
    src = _edited(exports, tmp_path, edit)
    extra = [f"adapter_dir={_without_dflash2_alias(tmp_path)}"] if dflash1_only else []
    capsys.readouterr()
    assert main(["convert", "adapter=zlab_dflash2", f"source={src}", f"out={tmp_path / 'x'}", f"to={to}",
                 "verifier=org/v", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(line, err[0]), err
    assert not (tmp_path / "x").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".draftsmith")]
