"""``inspect`` and ``convert`` say up front, in one warning line, when the emitted TensorRT-LLM
package cannot express a drafter (RoPE scaling, a value scale != 1; issue 36 point 5), and
``emit`` refuses it in one line with exit 2. The warned-about math is real: the host drafts
such a drafter like the float64 oracle, and the oracle run as TensorRT-LLM would (no value
scale) is far off."""

import json

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.execute import convert
from draftsmith.framework.convert.synth import synthesize
from draftsmith.framework.runtime.draft import run_draft
from support.helpers import read_checkpoint
from support.oracles import draft_oracle

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}


def _source(tmp_path, edit):
    synthesize(load_adapter("zlab_dflash"), "tiny", tmp_path / "S", seed=4)
    p = tmp_path / "S" / "config.json"
    raw = json.loads(p.read_text())
    edit(raw)
    p.write_text(json.dumps(raw))
    return tmp_path / "S"


def _value_scale(raw):
    raw["dflash_config"]["attention_value_scale"] = 0.25


def _rope(raw):
    raw["rope_scaling"] = dict(LLAMA3)


def _warnings(text):
    return [l for l in text.splitlines() if l.startswith("warning: TensorRT-LLM cannot express")]


@pytest.mark.parametrize("edit, named", [(_value_scale, "attention_value_scale 0.25"), (_rope, "rope_type 'llama3'")])
def test_inspect_and_convert_warn_emit_refuses(tmp_path, capsys, edit, named):
    src = _source(tmp_path, edit)
    capsys.readouterr()
    assert main(["inspect", f"source={src}"]) == 0
    (line,) = _warnings(capsys.readouterr().out)
    assert named in line
    assert main(["convert", f"source={src}", f"out={tmp_path / 'T'}"]) == 0
    (line,) = _warnings(capsys.readouterr().out)
    assert named in line
    assert main(["inspect", f"source={src}", "format=json"]) == 0
    assert named in json.loads(capsys.readouterr().out)["warnings"][0]
    assert main(["emit", "adapter=zlab_dflash", "target=trtllm", f"out={tmp_path / 'pkg'}",
                 f"config={tmp_path / 'T'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "TensorRT-LLM cannot express this drafter" in err[0] and named in err[0], err
    assert not (tmp_path / "pkg").exists() or not any((tmp_path / "pkg").iterdir())


def test_plain_drafter_has_no_warning(tmp_path, capsys):
    src = _source(tmp_path, lambda raw: None)
    capsys.readouterr()
    assert main(["inspect", f"source={src}"]) == 0
    assert not _warnings(capsys.readouterr().out)


def test_value_scaled_drafter_host_matches_oracle(tmp_path):
    """What the warning protects: the host applies the value scale as the oracle does; the
    oracle without it (what TensorRT-LLM's attention computes) is far off."""
    src = _source(tmp_path, _value_scale)
    a = load_adapter("zlab_dflash")
    convert(a, src, tmp_path / "T", progress=False)
    cfg, w = read_checkpoint(tmp_path / "T")
    dump = tmp_path / "step.safetensors"
    run_draft(tmp_path / "T", src / "target", context=19, seed=3, dtype="float32", dump=dump, repeats=1)
    d = load_file(dump)
    tgt = load_file(src / "target" / "model.safetensors")
    hidden, anchor = d["inputs.target_hidden"], int(d["inputs.anchor"][0])
    _, want, _ = draft_oracle(cfg, w, tgt, hidden, anchor)
    scale = want.abs().max()
    assert ((d["outputs.logits"].double() - want).abs().max() / scale).item() < 1e-4
    plain_cfg = json.loads(json.dumps(cfg))
    plain_cfg["dflash_config"].pop("attention_value_scale")
    _, unscaled, _ = draft_oracle(plain_cfg, w, tgt, hidden, anchor)
    assert ((unscaled - want).abs().max() / scale).item() > 0.05


def test_emit_refuses_a_value_scale(tmp_path, capsys):
    src = _source(tmp_path, _value_scale)
    convert(load_adapter("zlab_dflash"), src, tmp_path / "T", progress=False)
    capsys.readouterr()
    assert main(["emit", "adapter=zlab_dflash", "target=trtllm", f"out={tmp_path / 'pkg'}",
                 f"config={tmp_path / 'T'}"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "attention_value_scale 0.25" in line and "no value scale" in line
    assert not (tmp_path / "pkg").exists() or not any((tmp_path / "pkg").iterdir())
