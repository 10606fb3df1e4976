"""Every shipped adapter: synth (tiny) -> inspect (complete) -> convert -> the converted
weights equal the target-layout weights synth started from, bit for bit."""

import json

import pytest
import torch
from safetensors.torch import load_file

from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.adapters import ADAPTER_DIR
from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.converted_config import flatten
from draftsmith.framework.convert.synth import synthesize
from support.helpers import read_checkpoint as read_converted

ADAPTERS = sorted(p.stem for p in ADAPTER_DIR.glob("*.yaml"))




def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("name", ADAPTERS)
def test_synth_inspect_convert_roundtrip(name, capsys, checkpoints):
    ck = checkpoints(name)  # synth (keeping its targets), plan complete, convert: conftest.py
    res = ck.synth
    assert main(["inspect", f"adapter={name}", f"source={ck.source}"]) == 0, capsys.readouterr().out
    cfg, got = read_converted(ck.converted)
    assert sorted(got) == sorted(res.targets)
    bad = [n for n in got if not bits_equal(got[n], res.targets[n])]
    assert not bad, f"{name}: converted tensors differ from synth's targets: {bad}"
    # the converted config: outputs convention, and what synth flattened
    assert R.from_config(cfg).adapter == name
    assert cfg["dflash_config"] == res.config["dflash_config"]


@pytest.mark.parametrize("name", ADAPTERS)
def test_adapter_states_target_layer_convention(name):
    """Every adapter file says explicitly whether its target layer ids are outputs or inputs."""
    text = (ADAPTER_DIR / f"{name}.yaml").read_text()
    import yaml

    data = yaml.safe_load(text)
    assert data.get("target_layer_ids") in ("output", "input"), name


def test_input_convention_shifts_ids(tmp_path):
    """speculators' aux_hidden_state_layer_ids (layer inputs) become outputs: each id minus 1."""
    adapter = load_adapter("speculators_dspark")
    res = synthesize(adapter, "tiny", tmp_path / "s", seed=1)
    raw = json.loads((tmp_path / "s" / "config.json").read_text())
    assert res.config["dflash_config"]["target_layer_ids"] == [i - 1 for i in raw["aux_hidden_state_layer_ids"]]


def test_tiny_configs_fit_the_torch_host():
    for name in ADAPTERS:
        a = load_adapter(name)
        from draftsmith.framework.convert.synth import source_config

        cfg = flatten(a, source_config(a, "tiny"))
        assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0
        assert cfg["rotary_dim"] % 2 == 0 and cfg["rotary_dim"] <= cfg["head_dim"]
        if a.quant_methods:
            assert cfg["hidden_size"] % 32 == 0 and cfg["intermediate_size"] % 32 == 0
        for mask in R.from_config(cfg).masks:
            assert mask.window is None or mask.window <= 16
