"""``draftsmith init``: a starter spec inferred from a checkpoint's config and headers.

On the synthetic checkpoints of shipped adapters, the inferred spec (after the edits its
``# TODO:`` comments name) is accepted by ``inspect`` and converts to the same tensors,
config values and attention table as the shipped adapter.
"""

import json
import re

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.framework.cli.main import main
from draftsmith.framework.convert.execute import execute
from draftsmith.framework.convert.plan import plan as conversion_plan
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.starter.infer import infer
from draftsmith.framework.convert.synth import synthesize
from support.helpers import read_checkpoint

TODO = re.compile(r"#\s*TODO:\s*(.*)$")


def apply_todo_edits(text: str) -> tuple[str, list[str]]:
    """The edits the TODO comments name, done as a user would: fill the docs placeholders.

    Every other TODO asks to *confirm* a guess (row order, causality, convention); for a
    shipped adapter's synthetic checkpoint the guess is right and the line stays.
    """
    out, todos = [], []
    for line in text.splitlines():
        m = TODO.search(line)
        if m:
            todos.append(m.group(1))
            if "the model name shown in the docs table" in m.group(1):
                line = re.sub(r'model: ".*?"', 'model: "Inferred drafter"', line)
            elif "one line about the drafter" in m.group(1):
                line = re.sub(r'description: ".*?"', 'description: "inferred by draftsmith init"', line)
        out.append(line)
    return "\n".join(out) + "\n", todos


def converted(adapter, src, out):
    plan = conversion_plan(adapter, src)
    assert plan.complete, plan.report()
    return plan.config, load_file(execute(plan, out, progress=False) / "model.safetensors")


@pytest.mark.parametrize("shipped", ["minimax_dspark", "speculators_dspark", "trtllm_dflash"])
def test_init_on_shipped_synthetic_checkpoints(shipped, tmp_path, capsys, checkpoints):
    ck = checkpoints(shipped)  # the session's synthetic + converted checkpoint (conftest.py)
    src = ck.source
    spec_file = tmp_path / "inferred.yaml"
    assert main(["init", f"source={src}", f"out={spec_file}"]) == 0
    printed = capsys.readouterr().out
    text, todos = apply_todo_edits(spec_file.read_text())
    assert len(todos) == printed.count("  TODO: ")  # every TODO is reported on the command line too
    spec_file.write_text(text)
    assert main(["inspect", f"adapter={spec_file}", f"source={src}"]) == 0, capsys.readouterr().out

    ref_cfg, ref = read_checkpoint(ck.converted)
    cfg, got = converted(load_adapter(str(spec_file)), src, tmp_path / "got")
    assert sorted(got) == sorted(ref)
    assert all(torch.equal(got[n].view(torch.uint8), ref[n].view(torch.uint8)) for n in ref)
    for k in ("dflash_config", "dspark_config", "intermediate_size", "hidden_act", "head_dim", "rotary_dim"):
        assert cfg.get(k) == ref_cfg.get(k), k
    got, want = R.from_config(cfg), R.from_config(ref_cfg)
    assert got.norms == want.norms and got.max_draft_len == want.max_draft_len
    assert got.masks == want.masks


def test_init_reports_what_it_could_not_decide(tmp_path, capsys):
    """An extra tensor and no block-size key: both become TODOs, and inspect shows what is left."""
    src = tmp_path / "ckpt"
    synthesize(load_adapter("zlab_dflash"), "tiny", src, seed=3)
    w = load_file(src / "model.safetensors")
    w["layers.0.self_attn.g_proj.weight"] = torch.zeros(4, 128, dtype=torch.bfloat16)
    save_file(w, str(src / "model.safetensors"))
    raw = json.loads((src / "config.json").read_text())
    raw["draft_block"] = raw.pop("block_size")
    (src / "config.json").write_text(json.dumps(raw))

    res = infer(src, name="odd_drafter")
    assert any("dflash_config.block_size" in t for t in res.todos)
    assert any("layers.0.self_attn.g_proj.weight" in t for t in res.todos)
    lines = [l for l in res.yaml.splitlines() if "dflash_config.block_size:" in l]
    assert lines and "# TODO:" in lines[0]
    spec = yaml.safe_load(res.yaml)
    assert spec["config"]["fields"]["dflash_config.block_size"] == {"from": [], "required": True}
    (tmp_path / "odd_drafter.yaml").write_text(res.yaml)
    # the edit the TODO names: give the key, then inspect shows the unexpected tensor (exit 1)
    fixed = res.yaml.replace('dflash_config.block_size: {from: [], required: true}',
                             'dflash_config.block_size: {from: ["draft_block"], required: true}')
    (tmp_path / "odd_drafter.yaml").write_text(fixed)
    assert main(["inspect", f"adapter={tmp_path / 'odd_drafter.yaml'}", f"source={src}"]) == 1
    assert "layers.{0}.self_attn.g_proj.weight | UNEXPECTED" in capsys.readouterr().out


def test_init_refuses_to_overwrite(tmp_path, capsys, checkpoints):
    src = checkpoints("zlab_dflash").source
    out = tmp_path / "mine.yaml"
    out.write_text("keep me\n")
    assert main(["init", f"source={src}", f"out={out}"]) == 2
    assert out.read_text() == "keep me\n"
    # overwrite=true replaces only a spec that init wrote
    assert main(["init", f"source={src}", f"out={out}", "overwrite=true"]) == 2
    assert "not written by draftsmith init" in capsys.readouterr().err
    assert out.read_text() == "keep me\n"
    out.unlink()
    assert main(["init", f"source={src}", f"out={out}"]) == 0
    out.write_text(out.read_text().replace("name: mine", "name: mine  # edited"))
    assert main(["init", f"source={src}", f"out={out}", "overwrite=true"]) == 0
    assert yaml.safe_load(out.read_text())["name"] == "mine"
    assert "# edited" not in out.read_text()


def test_commented_dump_reads_back_as_the_spec():
    """Floats PyYAML would read as strings in JSON spelling (1e-06), keys YAML 1.1 reads as
    booleans (on), int keys, non-ASCII text: the dump reads back to the same spec."""
    from draftsmith.framework.spec.commented_yaml import dump
    from draftsmith.framework.spec.schema import AdapterSpec

    raw = {"architectures": ["X"], "rms_norm_eps": 1e-06, "on": True, "weird key": "ü\\n", "n": None,
           "nested": {"a": {"b": [1.5, 2]}}}
    spec = AdapterSpec.model_validate({
        "name": "x", "family": "gqa_dflash", "match": {"architectures": ["X"]},
        "attention": {"layers": {3: {"causal": True}}},
        "docs": {"model": "X", "example_checkpoint": "x"}, "synth": {"config": raw}})
    text = dump(spec, ["head"], {("attention", "layers", 3): "layer three", ("name",): "the name"},
                {("synth", "config"): ["after the config"]})
    assert text.startswith("# head\n")
    assert yaml.safe_load(text) == spec.model_dump(by_alias=True, exclude_unset=True)
    assert AdapterSpec.model_validate(yaml.safe_load(text)) == spec
    assert "  # layer three" in text and "# after the config" in text
