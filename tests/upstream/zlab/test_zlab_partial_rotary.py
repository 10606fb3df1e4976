"""Issue 37 part 5: z-lab's writer decides ``partial_rotary_factor``. ``dflash/model.py``
(@ 44947fb, played by the stand-in) builds transformers' own ``Qwen3RotaryEmbedding``; under the
installed transformers (5.19) its default rope rotates every dim of a head whatever
``partial_rotary_factor`` the config carries (top level, or inside ``rope_parameters``). So
adapters/zlab_dflash.yaml lists the key under ``config.writer_ignores``: a z-lab drafter saved
with one converts to full rotary, drafts like z-lab's forward, and ``inspect`` names the reader
that would run it differently."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="the writer's rotary embedding is transformers' own")
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "standin"))

import zlab_dflash_model as Z  # noqa: E402
from test_zlab_standin import assert_drafts_like, draftsmith_step, realistic, write_target  # noqa: E402
from draftsmith.framework.cli.main import main  # noqa: E402
from draftsmith.framework.compile.resolved import ResolvedDrafter  # noqa: E402


def qwen3_config(where: str):
    from transformers import Qwen3Config
    kw = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              intermediate_size=128, vocab_size=256, max_position_embeddings=4096, rms_norm_eps=1e-6)
    if where == "rope_parameters":
        return Qwen3Config(**kw, rope_parameters={"rope_type": "default", "rope_theta": 4321.0,
                                                  "partial_rotary_factor": 0.5})
    return Qwen3Config(**kw, rope_theta=4321.0, partial_rotary_factor=0.5)


@pytest.mark.parametrize("where", ["rope_parameters", "top_level"])
def test_transformers_qwen3_rotary_ignores_the_factor(where):
    """transformers' own code: every dim rotates (inv_freq has head_dim / 2 entries) and the
    angles are theta^(-2i/head_dim), not theta^(-2i/(head_dim/2))."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding
    cfg = qwen3_config(where)
    inv = Qwen3RotaryEmbedding(cfg).inv_freq.double()
    assert inv.numel() == 8
    want = 4321.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    assert torch.allclose(inv, want, rtol=1e-6)


@pytest.mark.parametrize("where", ["rope_parameters", "top_level"])
def test_zlab_drafter_with_factor_drafts_like_zlab(where, tmp_path, capsys):
    cfg = qwen3_config(where)
    cfg.block_size, cfg.num_target_layers = 8, 8
    cfg.dflash_config = {"target_layer_ids": [1, 3, 5], "mask_token_id": 250}
    m = Z.DFlashDraftModel(cfg)
    realistic(m, seed=21)
    m.to(torch.bfloat16).save_pretrained(str(tmp_path / "S"))
    raw = json.loads((tmp_path / "S" / "config.json").read_text())
    key = "partial_rotary_factor" if where == "top_level" else "rope_parameters.partial_rotary_factor"
    assert (raw if where == "top_level" else raw["rope_parameters"])["partial_rotary_factor"] == 0.5
    write_target(tmp_path / "target", 256, 64, seed=22)
    assert main(["convert", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 0
    r = ResolvedDrafter.from_config(json.loads((tmp_path / "T" / "config.json").read_text()))
    assert r.dims.rotary_dim == r.dims.head_dim == 16
    both = {"partial_rotary_factor", "rope_parameters.partial_rotary_factor"}  # 5.19 saves a top-level one in both
    assert key in r.writer_ignored and set(r.writer_ignored) <= both and "vLLM" in r.writer_ignored[key]
    loaded = Z.load(tmp_path / "S")
    assert loaded.rotary_emb.inv_freq.numel() == 8
    assert_drafts_like(loaded, draftsmith_step(tmp_path / "T", tmp_path / "target", tmp_path, seed=5))
    capsys.readouterr()
    assert main(["inspect", f"source={tmp_path / 'S'}"]) == 0
    assert f"ignored as the writer does: {key}  (a reader differs: " in capsys.readouterr().out
