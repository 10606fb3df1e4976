"""A converted config.json edited after conversion so that a key TensorRT-LLM reads no longer
agrees with the record draftsmith computes with is refused in one line naming the key and both
values, by every command that reads one from disk (``draft``, ``eval``, ``emit config=``); an
unedited one of every shipped adapter reads back as compiled."""

from __future__ import annotations

import copy
import json

import pytest

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.converted_config import compile_config
from draftsmith.framework.compile.read_back import read_converted
from draftsmith.framework.convert.synth import layouts, source_config
from draftsmith.framework.errors import UserError
from draftsmith.framework.spec.loading import adapter_files

CASES = [(n, l, s) for n in sorted(adapter_files()) for l in layouts(load_adapter(n)) for s in ("tiny", "full")]


@pytest.mark.parametrize("name,layout,scale", CASES, ids=[f"{n}-{l}-{s}" for n, l, s in CASES])
def test_an_unedited_converted_config_reads_back_as_compiled(name, layout, scale):
    a = load_adapter(name)
    flat, record = compile_config(a, source_config(a, scale, layout))
    assert read_converted(json.loads(json.dumps(flat))) == record


#: (adapter, key of the converted config, edited value): keys the record was compiled from, and
#: keys rendered from it for other readers (the masks' spellings, TensorRT-LLM's classes)
EDITS = [
    ("zlab_dflash", "dflash_config.block_size", 8),
    ("zlab_dflash", "hidden_size", 256),
    ("zlab_dflash", "rms_norm_eps", 1e-5),
    ("zlab_dflash", "dflash_config.mask_token_id", 3),
    ("zlab_dflash", "dflash_config.target_layer_ids", [0, 1, 2]),
    ("zlab_dflash", "hidden_act", "swigluoai"),
    ("zlab_dflash", "dspark_config.shift_label", True),
    ("minimax_dspark", "swiglu_alpha", 1.0),
    ("minimax_dspark", "dspark_block_size", 4),
    ("minimax_dspark", "use_sliding_window", True),
    ("minimax_dspark", "dspark_config.enable_confidence_head", False),
    ("zlab_dflash2", "dflash_config.selector_top_k", 6),
    ("zlab_dflash2", "is_causal", True),
    ("minimax_dspark", "sliding_window", 16),
    ("minimax_dspark", "layer_types", ["full_attention", "sliding_attention"]),
    ("trtllm_dflash", "dflash_config.use_swa", False),
]


@pytest.mark.parametrize("name,key,value", EDITS, ids=[f"{n}-{k}" for n, k, _ in EDITS])
def test_an_edited_key_that_disagrees_with_the_record_is_refused(name, key, value):
    a = load_adapter(name)
    flat, _ = compile_config(a, source_config(a, "tiny"))
    edited = copy.deepcopy(flat)
    *path, last = key.split(".")
    node = edited
    for part in path:
        node = node[part]
    assert last in node and node[last] != value, (key, node.get(last))
    node[last] = value
    with pytest.raises(UserError) as e:
        read_converted(edited, "conv/config.json")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"conv/config.json: {key} is {value!r} but its compiled record says "), msg


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("readback")
    src, conv = root / "src", root / "conv"
    assert main(["synth", "adapter=zlab_dflash", "scale=tiny", f"out={src}", "seed=5"]) == 0
    assert main(["convert", "adapter=zlab_dflash", f"source={src}", f"out={conv}"]) == 0
    cfg = json.loads((conv / "config.json").read_text())
    cfg["dflash_config"]["block_size"] = 8
    (conv / "config.json").write_text(json.dumps(cfg))
    return src, conv


@pytest.mark.parametrize("command", ["draft", "emit"])
def test_commands_refuse_an_edited_converted_config(converted, command, capsys, tmp_path):
    src, conv = converted
    args = {"draft": ["draft", f"checkpoint={conv}", f"target={src / 'target'}", "device=cpu"],
            "emit": ["emit", f"config={conv}", f"out={tmp_path / 'pkg'}"]}[command]
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dflash_config.block_size is 8 but its compiled record says 16" in err[0], err
    assert not (tmp_path / "pkg").exists()
