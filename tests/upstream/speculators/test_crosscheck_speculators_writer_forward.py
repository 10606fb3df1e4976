"""Issue 37 point 2: the writer's forward decides. speculators 0.9.0 builds its backbone's
RoPE with transformers 5.19's ``Qwen3RotaryEmbedding``, which rotates every dim of a head
whatever ``partial_rotary_factor`` its ``transformer_layer_config`` carries (top level or in
``rope_parameters``). A drafter speculators saved with one was trained with full rotary, so
draftsmith drafts like speculators' own forward (``tests/upstream/speculators/test_crosscheck_speculators_forward.py``
has the harness) and ``inspect`` names the reader that would run it differently."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("speculators", reason="the crosscheck extra (speculators==0.9.0) is not installed")

from draftsmith.framework.cli.main import main  # noqa: E402
from draftsmith.framework.compile.resolved import ResolvedDrafter  # noqa: E402
from test_crosscheck_speculators_forward import (  # noqa: E402
    ROPES, attach_target, build, compare, draftsmith_step, write_target)


@pytest.mark.parametrize("where", ["rope_parameters", "top_level"])
def test_partial_rotary_factor_ignored_as_speculators_does(where, tmp_path, monkeypatch, capsys):
    t = write_target(tmp_path / "target", seed=8)
    m = build("dflash", dict(ROPES["default"]), seed=7, verifier=tmp_path / "target")
    assert m.rotary_emb.inv_freq.numel() * 2 == 16  # speculators rotates all of head_dim 16
    m.save_pretrained(str(tmp_path / "S"))
    p = tmp_path / "S" / "config.json"
    raw = json.loads(p.read_text())
    tl = raw["transformer_layer_config"]
    (tl["rope_parameters"] if where == "rope_parameters" else tl)["partial_rotary_factor"] = 0.5
    p.write_text(json.dumps(raw))
    attach_target(m, t)
    assert main(["convert", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 0
    r = ResolvedDrafter.from_config(json.loads((tmp_path / "T" / "config.json").read_text()))
    assert r.dims.rotary_dim == r.dims.head_dim == 16
    key = "partial_rotary_factor" if where == "top_level" else "rope_parameters.partial_rotary_factor"
    assert set(r.writer_ignored) == {key} and "vLLM" in r.writer_ignored[key]
    d = draftsmith_step(tmp_path / "T", tmp_path / "target", tmp_path, seed=3)
    compare(m, d, monkeypatch, sample_from_anchor=False)
    capsys.readouterr()
    assert main(["inspect", f"source={tmp_path / 'S'}"]) == 0
    assert f"ignored as the writer does: {key}  (a reader differs: " in capsys.readouterr().out
