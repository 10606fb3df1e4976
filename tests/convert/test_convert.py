"""Plan, loading report, streaming conversion and synth round trips (tiny MiniMax)."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.convert.execute import convert, execute
from draftsmith.framework.convert.plan import plan as conversion_plan
from draftsmith.framework.errors import UserError
from support.helpers import minimax

P = "language_model.model.dspark."


@pytest.fixture(scope="module")
def synth(checkpoints):
    """The session's tiny minimax_dspark source checkpoint, with synth's targets (conftest.py)."""
    return checkpoints("minimax_dspark").synth


def bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def test_synth_writes_source_format(synth):
    raw = json.loads((synth.path / "config.json").read_text())
    assert raw["model_type"] == "minimax_m3_vl" and "text_config" in raw
    assert raw["quantization_config"]["quant_method"] == "mxfp8"
    src = load_file(synth.path / "model.safetensors")
    assert all(k.startswith(P) for k in src)
    q = src[P + "layers.0.decoder_layer.self_attn.q_proj.weight"]
    s = src[P + "layers.0.decoder_layer.self_attn.q_proj.weight_scale_inv"]
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.uint8 and s.shape[-1] * 32 == q.shape[-1]
    assert P + "final_norm.weight" in src and P + "embed_tokens.weight" not in src
    tgt = load_file(synth.path / "target" / "model.safetensors")
    assert set(tgt) == {"model.embed_tokens.weight", "lm_head.weight"}


def test_synth_then_convert_gives_back_the_weights(synth, tmp_path):
    plan = conversion_plan(minimax(), synth.path)
    assert plan.complete, plan.report()
    execute(plan, tmp_path / "T", progress=False)
    out = load_file(tmp_path / "T" / "model.safetensors")
    assert set(out) == set(synth.targets)
    for k, v in synth.targets.items():
        assert out[k].dtype == v.dtype and torch.equal(bits(out[k]), bits(v)), k
    cfg = json.loads((tmp_path / "T" / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["dflash_config"]["use_swa"] is True


def test_conversion_is_independent_of_the_transform_code(synth, checkpoints):
    """Check two converted tensors against float64 math on the raw source bytes."""
    out = load_file(checkpoints("minimax_dspark").converted / "model.safetensors")
    src = load_file(synth.path / "model.safetensors")
    w = src[P + "layers.1.decoder_layer.mlp.down_proj.weight"].double()
    e = src[P + "layers.1.decoder_layer.mlp.down_proj.weight_scale_inv"].double()
    want = w * torch.pow(2.0, e - 127).repeat_interleave(32, dim=1)
    assert torch.equal(out["layers.1.mlp.down_proj.weight"], want.to(torch.bfloat16))
    k = src[P + "layers.0.decoder_layer.self_attn.k_norm.weight"].double()
    assert torch.equal(out["layers.0.self_attn.k_norm.weight"], (1.0 + k).to(torch.bfloat16))
    qn = src[P + "layers.0.decoder_layer.self_attn.q_norm.weight"]
    assert torch.equal(out["layers.0.self_attn.q_norm.weight"], qn)  # kept, flagged gemma


def test_report_missing_extra_misshaped(synth, tmp_path):
    src = load_file(synth.path / "model.safetensors")
    del src[P + "layers.1.decoder_layer.mlp.up_proj.weight"]
    src[P + "surprise.weight"] = torch.randn(3).to(torch.bfloat16)
    src[P + "hidden_norm.weight"] = torch.randn(5).to(torch.bfloat16)
    bad = tmp_path / "bad"
    bad.mkdir()
    save_file(src, str(bad / "model.safetensors"))
    (bad / "config.json").write_text((synth.path / "config.json").read_text())
    plan = conversion_plan(minimax(), bad)
    report = plan.report()
    assert "layers.{1}.mlp.up_proj.weight | MISSING" in report
    assert "surprise.weight | UNEXPECTED" in report
    assert "hidden_norm.weight | MISMATCH" in report
    with pytest.raises(UserError):
        execute(plan, tmp_path / "T", progress=False)
    assert not (tmp_path / "T").exists()


def test_layer_ranges_compressed(synth, tmp_path):
    src = load_file(synth.path / "model.safetensors")
    for i in (0, 1):
        del src[P + f"layers.{i}.decoder_layer.input_layernorm.weight"]
    d = tmp_path / "bad"
    d.mkdir()
    save_file(src, str(d / "model.safetensors"))
    (d / "config.json").write_text((synth.path / "config.json").read_text())
    assert "layers.{0..1}.input_layernorm.weight | MISSING" in conversion_plan(minimax(), d).report()


def test_sharded_output_and_input(synth, tmp_path):
    a = minimax()
    a.spec.weights.max_shard_bytes = 100_000
    plan = conversion_plan(a, synth.path)
    execute(plan, tmp_path / "T", progress=False)
    index = json.loads((tmp_path / "T" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and set(index["weight_map"]) == set(synth.targets)
    # the sharded output reads back as the same tensors, and converts again as an input
    for name, shard in index["weight_map"].items():
        with safe_open(str(tmp_path / "T" / shard), "pt") as f:
            assert torch.equal(bits(f.get_tensor(name)), bits(synth.targets[name]))


def test_output_is_deterministic(synth, tmp_path):
    for n in ("A", "B"):
        convert(minimax(), synth.path, tmp_path / n, progress=False)
    for f in ("model.safetensors", "config.json"):
        assert (tmp_path / "A" / f).read_bytes() == (tmp_path / "B" / f).read_bytes()


def test_plan_reads_no_tensor_data(synth, monkeypatch):
    import safetensors

    def boom(*a, **k):
        raise AssertionError("tensor data read during planning")

    monkeypatch.setattr(safetensors, "safe_open", boom)
    monkeypatch.setattr("draftsmith.framework.convert.checkpoint.TensorReader.read", boom)  # the one tensor reader
    assert conversion_plan(minimax(), synth.path).complete


def test_existing_destination_kept_without_overwrite(synth, tmp_path):
    out = tmp_path / "T"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(UserError, match="overwrite=true"):
        convert(minimax(), synth.path, out, progress=False)
    assert (out / "keep.txt").read_text() == "x"
    with pytest.raises(UserError, match="not written by draftsmith"):  # not ours: never replaced
        convert(minimax(), synth.path, out, overwrite=True, progress=False)
    assert (out / "keep.txt").read_text() == "x"
    (out / "keep.txt").unlink()
    convert(minimax(), synth.path, out, progress=False, overwrite=True)  # empty: may be replaced
    (out / "stale.txt").write_text("y")
    convert(minimax(), synth.path, out, overwrite=True, progress=False)  # ours: replaced whole
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").exists()


def test_cli_acceptance(tmp_path, capsys):
    s, t, t2 = tmp_path / "S", tmp_path / "T", tmp_path / "T2"
    assert main(["synth", "adapter=minimax_dspark", "scale=tiny", f"out={s}", "seed=3"]) == 0
    assert main(["convert", "adapter=minimax_dspark", f"source={s}", f"out={t}"]) == 0
    cfg = json.loads((t / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["dflash_config"]["use_swa"] is True
    assert "fc.weight" in load_file(t / "model.safetensors")
    assert main(["convert", "adapter=minimax_dspark", f"source={s}", f"out={t2}", "adapter.attention.window=2048"]) == 0
    assert json.loads((t2 / "config.json").read_text())["dflash_config"]["swa_window_size"] == 2048
    # inspect: complete -> 0; one tensor removed -> 1 and named
    assert main(["inspect", "adapter=minimax_dspark", f"source={s}"]) == 0
    src = load_file(s / "model.safetensors")
    gone = P + "layers.1.decoder_layer.self_attn.o_proj.weight_scale_inv"
    del src[gone]
    save_file(src, str(s / "model.safetensors"))
    capsys.readouterr()
    assert main(["inspect", "adapter=minimax_dspark", f"source={s}"]) == 1
    assert gone.replace("layers.1", "layers.{1}") in capsys.readouterr().out


def test_cli_inspect_routes_without_adapter(synth, capsys):
    assert main(["inspect", f"source={synth.path}"]) == 0
    assert "adapter: minimax_dspark" in capsys.readouterr().out


def test_cli_target_root_hint(synth, tmp_path, capsys):
    root = tmp_path / "root"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"architectures": ["MiniMaxM3ForCausalLM"]}))
    (root / "dspark").symlink_to(synth.path)
    # the target's root as downloaded: the drafter is read from dspark/ (issue 36; it was refused)
    assert main(["inspect", f"source={root}"]) == 0
    assert f"using {root / 'dspark'} (drafter subfolder dspark/)" in capsys.readouterr().err


def test_spec_typo_one_line_error(tmp_path, capsys):
    from draftsmith.adapters import ADAPTER_DIR

    text = (ADAPTER_DIR / "minimax_dspark.yaml").read_text().replace("  windowed_causal: false", "  windowed_casual: false")
    d = tmp_path / "ad"
    d.mkdir()
    (d / "typo.yaml").write_text(text.replace("name: minimax_dspark", "name: typo"))
    assert main(["inspect", "adapter=typo", f"adapter_dir={d}", f"source={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "windowed_casual" in l)
    assert f"typo.yaml:{line}: attention.windowed_casual: unknown key (did you mean 'windowed_causal'?)" in err[0]
    assert "Traceback" not in err[0]


def test_embedded_default_main_job(tmp_path, capsys):
    assert main(["convert", "adapter=minimax_dspark", f"out={tmp_path / 'T'}"]) == 0
    assert (tmp_path / "T" / "config.json").is_file()
    assert "no source= given" in capsys.readouterr().out
    assert (tmp_path / "T.source" / "target").is_dir()  # the embedded source, kept for draft target=


def test_schema_export(tmp_path):
    assert main(["schema", f"out={tmp_path / 's.json'}"]) == 0
    schema = json.loads((tmp_path / "s.json").read_text())
    assert "attention" in schema["properties"]

    def walk(node):
        if isinstance(node, dict):
            if "properties" in node:
                for k, v in node["properties"].items():
                    assert "description" in v, k
            for v in node.values():
                walk(v)
    walk(schema)
