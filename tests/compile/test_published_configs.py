"""Real published configs convert (issue 46, point 5).

Training-only and library-bookkeeping keys that change nothing (attention backend choices such as
``transformer_layer_config.flex_attention_backend``, ``_attn_implementation``; ``use_cache``,
``transformers_version``, ...) are declared irrelevant once, by the family
(``framework/compile/family.py`` ``GQADFlash.irrelevant``), each with its reason in the loading
report; a key nobody declared is still refused in one line.

The configs: every adapter's full-scale ``synth.config`` is the published layout its comments cite
(z-lab DFlash / DFlash 2 as ``incoai/Qwen3.8-27B-DFlash2`` and ``z-lab/Qwen3-8B-DFlash-b16`` ship it,
Muse Glimmer, MiniMax-M3.1's DSpark, the speculators formats). The Kimi-K3 DSpark speculator's
``config.json`` (speculators format) is not in this repository and the hub is unreachable here: it
is the speculators DSpark layout (``DSparkSpeculatorConfig`` fields) with the training-time key that
issue 46 quotes from it, ``transformer_layer_config.flex_attention_backend``. speculators' own config
class reads it; draftsmith must convert and draft it.
"""

from __future__ import annotations

import copy
import json

import pytest

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.converted_config import compile_config
from draftsmith.framework.compile.resolve import resolve
from draftsmith.framework.compile.family import get_family
from draftsmith.framework.convert.synth import source_config, synthesize
from draftsmith.framework.errors import UserError
from support.helpers import one_error
from support.reliability_log import record

AREA = "round4"
PUBLISHED = ["zlab_dflash", "zlab_dflash2", "meta_muse_glimmer", "minimax_dspark", "speculators_dspark",
             "speculators_dflash", "speculators_dflash2", "deepseek_dspark_dense"]
#: what the Kimi-K3 DSpark speculator's published config adds to the speculators DSpark layout
KIMI_K3_EXTRA = {"flex_attention_backend": "flash"}
#: keys every transformers-saved config may carry: bookkeeping, never math
BOOKKEEPING = {"_attn_implementation": "sdpa", "use_cache": True, "transformers_version": "5.15.0",
               "_attn_implementation_autoset": True, "attn_implementation": "flex_attention",
               "gradient_checkpointing": False}


def kimi_k3(raw: dict) -> dict:
    raw = copy.deepcopy(raw)
    raw["transformer_layer_config"].update(KIMI_K3_EXTRA)
    return raw


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_full_scale_config_compiles(name):
    a = load_adapter(name)
    compile_config(a, source_config(a, "full"))


def test_kimi_k3_dspark_speculator_config_compiles_and_reports_why():
    a = load_adapter("speculators_dspark")
    raw = kimi_k3(source_config(a, "full"))
    r = resolve(a, raw)
    assert r.irrelevant["flex_attention_backend"] == get_family("gqa_dflash").irrelevant["flex_attention_backend"]
    assert "same attention" in r.irrelevant["flex_attention_backend"]


def test_speculators_reads_the_kimi_k3_layout():
    """speculators' own config class takes the published layout (the extra key rides in its Qwen3
    ``transformer_layer_config``), so the checkpoint is one speculators itself serves."""
    pytest.importorskip("speculators", reason="the crosscheck extra (speculators==0.9.0) is not installed")
    from speculators.models.dspark import DSparkSpeculatorConfig

    raw = kimi_k3(source_config(load_adapter("speculators_dspark"), "full"))
    cfg = DSparkSpeculatorConfig.from_dict(copy.deepcopy(raw))
    assert cfg.transformer_layer_config.to_dict()["flex_attention_backend"] == "flash"
    assert cfg.block_size == raw["block_size"]


@pytest.fixture(scope="module")
def kimi(tmp_path_factory):
    """A tiny speculators DSpark drafter whose config.json carries the Kimi-K3 extra and the
    transformers bookkeeping keys (in its transformer_layer_config, where transformers writes them)."""
    d = tmp_path_factory.mktemp("kimi")
    synthesize(load_adapter("speculators_dspark"), "tiny", d / "S", seed=6)
    raw = kimi_k3(json.loads((d / "S" / "config.json").read_text()))
    raw["transformer_layer_config"].update(BOOKKEEPING)
    (d / "S" / "config.json").write_text(json.dumps(raw, indent=2))
    return d


def test_kimi_k3_dspark_speculator_converts_and_drafts(kimi, capsys):
    S, T = kimi / "S", kimi / "T"
    assert main(["inspect", f"source={S}"]) == 0, capsys.readouterr().err[-2000:]
    out = capsys.readouterr().out
    reasons = get_family("gqa_dflash").irrelevant
    for key in ("flex_attention_backend", *BOOKKEEPING):
        assert f"irrelevant {key}  (spec config.irrelevant: {reasons[key]})" in out, key
    assert main(["convert", f"source={S}", f"out={T}", "progress=false"]) == 0, capsys.readouterr().err[-2000:]
    capsys.readouterr()
    assert main(["draft", f"checkpoint={T}", f"target={S / 'target'}", "device=cpu", "context=16",
                 "format=json"]) == 0, capsys.readouterr().err[-2000:]
    report = json.loads(capsys.readouterr().out)
    assert len(report["tokens"][0]) == report["max_draft_len"]
    record(AREA, "Kimi-K3 DSpark speculator config (transformer_layer_config.flex_attention_backend)",
           "converts and drafts; reason in the loading report")


@pytest.mark.parametrize("key", ["flex_attention_backend_v2", "attn_logit_scale"])
def test_undeclared_key_still_refused_in_one_line(kimi, tmp_path, capsys, key):
    S = tmp_path / "S"
    import shutil

    shutil.copytree(kimi / "S", S)
    raw = json.loads((S / "config.json").read_text())
    raw["transformer_layer_config"][key] = 2
    (S / "config.json").write_text(json.dumps(raw))
    assert main(["convert", f"source={S}", f"out={tmp_path / 'T'}"]) == 2
    line = one_error(capsys)
    assert f"transformer_layer_config.{key}: not read by family gqa_dflash" in line, line
    assert not (tmp_path / "T").exists()
    record(AREA, f"undeclared config key transformer_layer_config.{key}", "exit 2, one line naming it")


def test_every_declared_key_has_a_reason():
    for name in ("gqa_dflash", "gqa_dflash2"):
        fam = get_family(name)
        for key, why in fam.irrelevant.items():
            assert isinstance(why, str) and len(why) > 10, key
            assert key not in fam.consumes, key  # one place for each rule
    with pytest.raises(UserError):
        a = load_adapter("speculators_dspark")
        raw = source_config(a, "full")
        raw["transformer_layer_config"]["flex_attention_backend_v2"] = "x"
        compile_config(a, raw)


def test_kimi_k3_export_loads_in_speculators(kimi, capsys, monkeypatch):
    """``convert to=speculators`` of the Kimi-K3 layout: speculators' own ``from_pretrained`` loads it."""
    pytest.importorskip("speculators", reason="the crosscheck extra (speculators==0.9.0) is not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import torch
    from speculators.models.dspark import DSparkDraftModel

    S, X = kimi / "S", kimi / "X"
    assert main(["convert", f"source={S}", f"out={X}", "to=speculators", f"verifier={S / 'target'}",
                 "progress=false"]) == 0, capsys.readouterr().err[-2000:]
    m = DSparkDraftModel.from_pretrained(str(X), torch_dtype=torch.bfloat16)
    assert type(m) is DSparkDraftModel and m.config.block_size == json.loads((S / "config.json").read_text())["block_size"]
