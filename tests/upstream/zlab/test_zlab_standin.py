"""``convert ... to=zlab_dflash`` exports and the ``zlab_dflash`` adapter's input side, checked
against z-lab's own model as played by the stand-in ``standin/zlab_dflash_model.py``
(z-lab/dflash ``dflash/model.py`` @ 44947fb, on transformers' own Qwen3 building blocks and
``from_pretrained`` / ``save_pretrained``; see PROVENANCE.md). CPU, float32.

(a) every shipped adapter whose drafters z-lab can run exports to z-lab's layout; the export
    carries every key z-lab's transformers and MLX loaders read, no other format's marker,
    loads through the stand-in's strict ``from_pretrained`` (no missing / unexpected /
    mis-shaped tensor), and its forward on draftsmith's dumped inputs gives draftsmith's
    logits and greedy tokens (and the float64 oracle's);
(b) a tiny drafter built and saved by the stand-in (``save_pretrained``, as z-lab's class
    saves) converts with adapters/zlab_dflash.yaml and drafts equal to the stand-in's forward;
(c) the adapters z-lab cannot run are refused in one line naming the feature.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("transformers", reason="the stand-in runs on transformers' Qwen3 building blocks")
sys.path.insert(0, str(Path(__file__).parent / "standin"))

import zlab_dflash_model as Z  # noqa: E402
from draftsmith.framework.cli.main import main  # noqa: E402
from draftsmith.framework.compile.adapter import load_adapter, route  # noqa: E402
from draftsmith.framework.convert.export import all_markers  # noqa: E402
from draftsmith.framework.convert.synth import synthesize  # noqa: E402
from draftsmith.framework.runtime.draft import run_draft  # noqa: E402
from draftsmith.framework.spec.loading import adapter_files  # noqa: E402
from support.oracles import draft_oracle  # noqa: E402
from support.numerics import rel  # noqa: E402

CONTEXT = 21
EXPORTABLE = ("zlab_dflash", "trtllm_dflash", "meta_muse_glimmer")
REFUSED = {  # adapter -> the feature z-lab's model cannot run (Qwen3MLP silu, is_causal=False, no heads)
    "speculators_dflash": "causal sliding-window layers",
    "speculators_dspark": "the Markov (rank 16) / confidence (True) heads",
    "deepseek_dspark_dense": "the Markov (rank 16) / confidence (True) heads",
    "minimax_dspark": "the clamped SwiGLU MLP",
    "minimax_dspark_v0": "the clamped SwiGLU MLP",
    "zlab_dflash2": "a gqa_dflash2 drafter",  # DFlash 2's convolutions and selector: z-lab's DFlash 1 class
    "speculators_dflash2": "a gqa_dflash2 drafter",
    "minimax_dflash2": "a gqa_dflash2 drafter",
}


def test_every_adapter_is_classified():
    """A new adapter must be added to EXPORTABLE or REFUSED (and so be checked here)."""
    assert set(adapter_files()) == set(EXPORTABLE) | set(REFUSED)


def draftsmith_step(converted, target, tmp_path, seed: int) -> dict:
    dump = tmp_path / f"dump{seed}.safetensors"
    run_draft(converted, target, context=CONTEXT, seed=seed, dtype="float32", dump=dump, repeats=1)
    return load_file(dump)


def standin_step(m, d: dict, hidden=None):
    return Z.draft_block(m, d["target.embed_tokens"], d["target.lm_head"],
                         d["inputs.target_hidden"] if hidden is None else hidden, int(d["inputs.anchor"][0]))


def assert_drafts_like(m, d: dict) -> None:
    """The stand-in's forward on draftsmith's dumped inputs: draftsmith's logits and tokens;
    another context moves the stand-in far beyond the tolerance (the check can fail)."""
    toks, logits = standin_step(m, d)
    assert rel(d["outputs.logits"], logits) < 1e-5
    assert torch.equal(toks, d["outputs.tokens"])
    _, other = standin_step(m, d, torch.randn_like(d["inputs.target_hidden"]))
    assert rel(other, logits) > 1e-2


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}


@pytest.mark.parametrize("source, scaling", [*((s, None) for s in EXPORTABLE), ("zlab_dflash", YARN)])
def test_export_loads_and_drafts_in_zlab(source, scaling, tmp_path):
    adapter = load_adapter(source)
    synthesize(adapter, "tiny", tmp_path / "s", seed=6)
    if scaling is not None:  # transformers-4 layout, as z-lab's pinned transformers 4.57.1 and its MLX loader read
        raw = json.loads((tmp_path / "s" / "config.json").read_text())
        (tmp_path / "s" / "config.json").write_text(json.dumps(dict(raw, rope_scaling=scaling)))
    target = tmp_path / "s" / "target"
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'c'}"]) == 0
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'x'}", "to=zlab_dflash"]) == 0
    raw = json.loads((tmp_path / "x" / "config.json").read_text())
    # every key z-lab's transformers path (math) and MLX loader (KeyError) read, of the right type
    assert Z.config_problems(raw) == [] and Z.config_problems(raw, Z.MLX_KEYS) == []
    assert raw["architectures"] == ["DFlashDraftModel"] and raw["model_type"] == "qwen3"
    own = set(load_adapter("zlab_dflash").spec.export.markers)
    assert not (set(raw) & (all_markers() - own)) and "draftsmith" not in raw
    assert "speculators_config" not in raw
    m = Z.load(tmp_path / "x")  # strict: every tensor z-lab's class holds, no other, right shapes
    exported = load_file(tmp_path / "x" / "model.safetensors")
    sd = m.state_dict()
    assert set(exported) == {k for k in sd if not k.startswith("rotary_emb.")}
    for k, t in exported.items():
        assert torch.equal(sd[k], t.float()), k
    assert m.block_size == raw["block_size"] and m.target_layer_ids == raw["dflash_config"]["target_layer_ids"]
    assert raw.get("rope_scaling") == scaling  # top level: what z-lab's readers look at
    if scaling is not None:  # transformers' own YaRN reached z-lab's rotary embedding
        assert m.rotary_emb.rope_type == "yarn"
    d = draftsmith_step(tmp_path / "c", target, tmp_path, seed=3)
    assert_drafts_like(m, d)
    if scaling is not None:
        return  # the float64 YaRN formula is checked against the host in tests/compile/test_rope_scaling.py
    # the float64 oracle (tests/support/oracles.py) on the export's own tensors and rope base
    from support.helpers import read_checkpoint
    cfg, w = read_checkpoint(tmp_path / "c")
    _, ologits, _ = draft_oracle(dict(cfg, rope_theta=raw["rope_theta"]), w, load_file(target / "model.safetensors"),
                                 d["inputs.target_hidden"], int(d["inputs.anchor"][0]))
    assert rel(standin_step(m, d)[1], ologits) < 1e-4
    # z-lab applies windows only under flash-attn: its sdpa fallback runs windowed layers full
    m.attention_impl = "sdpa"
    windowed = any(t == "sliding_attention" for t in raw.get("layer_types") or [])
    assert (rel(standin_step(m, d)[1], d["outputs.logits"]) > 1e-2) == windowed


def realistic(m: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


def write_target(folder: Path, v: int, h: int, seed: int) -> None:
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(seed)
    save_file({"model.embed_tokens.weight": torch.randn(v, h, generator=g),
               "lm_head.weight": torch.randn(v, h, generator=g) / h ** 0.5 * 4}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                                    "hidden_size": h, "vocab_size": v, "torch_dtype": "float32"}))


@pytest.mark.parametrize("layers, switch", [(("full_attention", "full_attention"), True),
                                            (("sliding_attention", "full_attention"), True),
                                            (("sliding_attention", "full_attention"), False)])
def test_zlab_saved_converts_and_drafts(layers, switch, tmp_path):
    """A drafter in z-lab's own layout: the stand-in's class (z-lab's module names) saved by
    transformers' ``save_pretrained`` in bf16, with a non-default rope base, as z-lab's
    class saves; its config routes to zlab_dflash without ``adapter=``. ``switch`` false: the
    saved config is then edited to ``sliding_window: 8`` with ``use_sliding_window: false``
    (a hand-written config): ``Qwen3Config`` drops the window, so z-lab's sliding layer sees
    every key, and so must draftsmith (``attention.hf_window_switch``)."""
    from transformers import Qwen3Config
    v, h = 256, 64
    cfg = Qwen3Config(hidden_size=h, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      intermediate_size=128, vocab_size=v, max_position_embeddings=4096, rms_norm_eps=1e-6,
                      rope_theta=54321.0, use_sliding_window=switch and "sliding_attention" in layers, sliding_window=8,
                      layer_types=list(layers))
    cfg.block_size, cfg.num_target_layers = 8, 8
    cfg.dflash_config = {"target_layer_ids": [1, 3, 5], "mask_token_id": 250}
    cfg.auto_map = {"AutoModel": "dflash.DFlashDraftModel"}  # as z-lab's releases carry
    m = Z.DFlashDraftModel(cfg)
    realistic(m, seed=11)
    m.to(torch.bfloat16).save_pretrained(str(tmp_path / "S"))
    raw = json.loads((tmp_path / "S" / "config.json").read_text())
    assert raw["architectures"] == ["DFlashDraftModel"] and route(raw).name == "zlab_dflash"
    if not switch:
        assert raw["use_sliding_window"] is False
        (tmp_path / "S" / "config.json").write_text(json.dumps(dict(raw, sliding_window=8)))
    write_target(tmp_path / "target", v, h, seed=12)
    assert main(["convert", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}"]) == 0
    d = draftsmith_step(tmp_path / "T", tmp_path / "target", tmp_path, seed=4)
    loaded = Z.load(tmp_path / "S")
    assert loaded.layers[0].self_attn.sliding_window == (8 if switch and "sliding_attention" in layers else None)
    assert loaded.rotary_emb.inv_freq[1].item() == pytest.approx(54321.0 ** (-2 / 16), rel=1e-6)
    assert_drafts_like(loaded, d)


@pytest.mark.parametrize("source", sorted(REFUSED))
def test_what_zlab_cannot_run_is_refused(source, tmp_path, capsys):
    synthesize(load_adapter(source), "tiny", tmp_path / "s", seed=1)
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'x'}", "to=zlab_dflash"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "to=zlab_dflash: the zlab_dflash format cannot express" in err[0]
    assert REFUSED[source] in err[0]
    assert not (tmp_path / "x").exists()


def test_other_target_width_is_refused(tmp_path, capsys):
    """z-lab's ``fc`` is ``[h, len(ids) * hidden_size]``: its loader refuses a drafter whose target
    is wider or narrower than the drafter (transformers: size mismatch), so the export is refused."""
    synthesize(load_adapter("trtllm_dflash"), "tiny", tmp_path / "s", seed=2)
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'x'}", "to=zlab_dflash"]) == 0
    cfg_path, w_path = tmp_path / "s" / "config.json", tmp_path / "s" / "model.safetensors"
    raw = json.loads(cfg_path.read_text())
    h, n = raw["hidden_size"], len(raw["dflash_config"]["target_layer_ids"])
    raw["target_hidden_size"] = h // 2
    cfg_path.write_text(json.dumps(raw))
    w = load_file(w_path)
    w["fc.weight"] = torch.randn(h, n * h // 2).to(w["fc.weight"].dtype)
    save_file(w, str(w_path))
    # z-lab's own loader on such a checkpoint (the export above with the narrower fc): refused
    x = load_file(tmp_path / "x" / "model.safetensors")
    x["fc.weight"] = w["fc.weight"]
    save_file(x, str(tmp_path / "x" / "model.safetensors"))
    with pytest.raises(Z.LoadRefused, match="from_pretrained"):  # size mismatch (wording varies by version)
        Z.load(tmp_path / "x")
    capsys.readouterr()
    assert main(["convert", f"source={tmp_path / 's'}", f"out={tmp_path / 'y'}", "to=zlab_dflash"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: to=zlab_dflash: the zlab_dflash format cannot express a target hidden size ({h // 2}) "
                   f"other than the drafter's hidden size ({h}) (export.unsupported: target_hidden)"]
    assert not (tmp_path / "y").exists()


def test_num_target_layers_is_read_even_with_ids():
    """Why exports derive ``num_target_layers``: z-lab's ``__init__`` evaluates the default ids
    (from ``num_target_layers``) before looking for ``dflash_config.target_layer_ids``."""
    from transformers import Qwen3Config
    cfg = Qwen3Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                      intermediate_size=64, vocab_size=64)
    cfg.block_size, cfg.dflash_config = 4, {"target_layer_ids": [1], "mask_token_id": 3}
    with pytest.raises(AttributeError, match="num_target_layers"):
        Z.DFlashDraftModel(cfg)
    cfg.num_target_layers = 4
    assert Z.DFlashDraftModel(cfg).target_layer_ids == [1]
    assert Z.config_problems({"block_size": 4}) and "num_target_layers: missing" in Z.config_problems({})
