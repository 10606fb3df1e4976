"""Issue 47 points 2, 3 and 6 (emit): ``config=`` is resolved as ``convert`` resolves ``source=`` and
must be a ``convert`` output; ``adapter=`` comes from the converted config when omitted; a mismatch
names both adapters and the file; the printed ``trtllm-serve`` line carries the package's paths."""

import json
import shlex

import pytest

from draftsmith.framework.cli.main import main

ADAPTER = "zlab_dflash"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("lastmile")
    src, conv = root / "src", root / "conv"
    assert main(["synth", f"adapter={ADAPTER}", "scale=tiny", f"out={src}", "seed=3"]) == 0
    assert main(["convert", f"adapter={ADAPTER}", f"source={src}", f"out={conv}"]) == 0
    return {"src": src, "conv": conv}


def _emit(capsys, *args):
    capsys.readouterr()
    rc = main(["emit", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err.strip()


def test_an_unconverted_config_is_refused_in_one_line(folders, capsys, tmp_path):
    rc, out, err = _emit(capsys, f"adapter={ADAPTER}", f"out={tmp_path / 'o'}", f"config={folders['src']}")
    assert rc == 2 and "\n" not in err and "not a `draftsmith convert` output" in err and str(folders["src"]) in err
    assert not (tmp_path / "o").exists()


def test_adapter_is_read_from_the_converted_config(folders, capsys, tmp_path):
    rc, out, err = _emit(capsys, f"out={tmp_path / 'o'}", f"config={folders['conv']}")
    assert rc == 0, err
    assert f"adapter '{ADAPTER}'" in out


def test_a_mismatch_names_both_adapters_and_the_file(folders, capsys, tmp_path):
    rc, out, err = _emit(capsys, "adapter=minimax_dspark", f"out={tmp_path / 'o'}", f"config={folders['conv']}")
    assert rc == 2 and "\n" not in err, err
    assert f"adapter={ADAPTER}" in err and "adapter=minimax_dspark" in err and str(folders["conv"]) in err
    assert "resolved.adapter" not in err


def test_the_printed_serve_line_names_the_package_paths(folders, capsys, tmp_path):
    rc, out, err = _emit(capsys, f"out={tmp_path / 'o'}", f"config={folders['conv']}")
    assert rc == 0, err
    pkg = next(p for p in (tmp_path / "o").iterdir() if (p / "__init__.py").is_file()).resolve()
    line = next(l.strip() for l in out.splitlines() if l.strip().startswith("trtllm-serve "))
    words = shlex.split(line)
    assert words[words.index("--custom_module_dirs") + 1] == str(pkg)
    assert words[words.index("--config") + 1] == str(pkg / "speculative_config.yaml")


def test_a_model_root_config_resolves_to_its_drafter_subfolder(folders, capsys, tmp_path):
    """The root's own config.json (the target's) is never read as the drafter's: MiniMax's ``dspark/``
    subfolder is found as convert finds it, and refused here because it is not converted."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"architectures": ["MiniMaxM3SparseForCausalLM"]}))
    assert main(["synth", "adapter=minimax_dspark", "scale=tiny", f"out={root / 'dspark'}", "seed=3"]) == 0
    rc, out, err = _emit(capsys, "adapter=minimax_dspark", f"out={tmp_path / 'o'}", f"config={root}")
    assert rc == 2 and str(root / "dspark") in err.splitlines()[-1] and "not a `draftsmith convert` output" in err, err
    assert "using" in err.splitlines()[0] and "dspark" in err.splitlines()[0]


def _serve_words(out):
    return shlex.split(next(l.strip() for l in out.splitlines() if l.strip().startswith("trtllm-serve ")))


def test_model_completes_the_serve_line_and_names_the_target_architecture(folders, capsys, tmp_path):
    """``model=`` (issue 47 point 1): the printed line needs no edit, and the target's config.json
    gives ``target_architecture`` (what carries the package into TensorRT-LLM's workers)."""
    target = folders["src"] / "target"
    arch = json.loads((target / "config.json").read_text())["architectures"][0]
    rc, out, err = _emit(capsys, f"out={tmp_path / 'o'}", f"config={folders['conv']}", f"model={target}")
    assert rc == 0, err
    words = _serve_words(out)
    assert words[1] == str(target.resolve()) and not any(w.startswith("<") for w in words), words
    assert f"target_architecture={arch}" in err
    data = json.loads(next((tmp_path / "o").glob("*/resolved.json")).read_text())
    assert data["target_architecture"] == arch


def test_without_model_the_placeholder_says_which_key_fills_it(folders, capsys, tmp_path):
    rc, out, err = _emit(capsys, f"out={tmp_path / 'o'}", f"config={folders['conv']}")
    assert rc == 0, err
    line = next(l.strip() for l in out.splitlines() if l.strip().startswith("trtllm-serve "))
    assert line.startswith("trtllm-serve <target model> ") and "pass model=" in out


def test_a_model_root_config_is_also_the_model(capsys, tmp_path):
    """``config=<model root>`` whose drafter subfolder is converted: the root is the served model."""
    root = tmp_path / "root"
    assert main(["synth", "adapter=minimax_dspark", "scale=tiny", f"out={tmp_path / 's'}", "seed=3"]) == 0
    assert main(["convert", "adapter=minimax_dspark", f"source={tmp_path / 's'}", f"out={root / 'dspark'}"]) == 0
    (root / "config.json").write_text(json.dumps({"architectures": ["MiniMaxM3SparseForCausalLM"]}))
    rc, out, err = _emit(capsys, f"out={tmp_path / 'o'}", f"config={root}")
    assert rc == 0, err
    assert _serve_words(out)[1] == str(root.resolve())
    assert "target_architecture=MiniMaxM3SparseForCausalLM" in err


@pytest.mark.parametrize("case", ["mismatch", "converted", "no_architectures"])
def test_model_errors_are_one_line_naming_the_argument(folders, capsys, tmp_path, case):
    target = folders["src"] / "target"
    args = [f"out={tmp_path / 'o'}", f"config={folders['conv']}"]
    if case == "mismatch":
        args += [f"model={target}", "target_architecture=SomethingElseForCausalLM"]
    elif case == "converted":
        args += [f"model={folders['conv']}"]
    else:
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / "config.json").write_text(json.dumps({"architectures": "NotAList"}))
        args += [f"model={bad}"]
    rc, out, err = _emit(capsys, *args)
    assert rc == 2 and "\n" not in err and "model=" in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("cfg, expected", [
    ({}, 2048),
    ({"max_position_embeddings": 40960}, 40960),
    ({"max_position_embeddings": 40960, "rope_scaling": {"type": "linear", "factor": 4.0}}, 163840),
    ({"max_position_embeddings": 1001, "rope_scaling": {"rope_type": "dynamic", "factor": 1.5}}, 1502),
    ({"max_position_embeddings": 40960, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, 40960),
    ({"max_position_embeddings": 8192, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 8192),
    ({"max_position_embeddings": 4096, "rope_parameters": {"rope_type": "linear", "factor": 2}}, 8192),
    ({"max_position_embeddings": 4096, "text_config": {"max_position_embeddings": 196608}}, 196608),
])
def test_default_max_seq_len_is_trtllms_inference(cfg, expected):
    """TensorRT-LLM's default ``max_seq_len`` for a target (``infer_max_seq_len``): its
    ``max_position_embeddings`` (2048 without), scaled by a RoPE factor except for su / longrope /
    llama3 / yarn; a multimodal target's language model (``text_config``)."""
    from draftsmith.framework.emit.serving_target import default_max_seq_len

    assert default_max_seq_len(cfg) == expected


@pytest.mark.parametrize("target_positions, noted", [(131072, True), (40960, False), (None, False)])
def test_a_target_served_past_the_drafters_rope_table_gets_a_note(folders, capsys, tmp_path, target_positions,
                                                                  noted):
    """The zlab drafter ropes positions below its ``max_position_embeddings`` (40960 in its synth
    config); a target TensorRT-LLM serves longer by default gets one ``note:`` naming both lengths."""
    drafter = json.loads((folders["conv"] / "config.json").read_text())["max_position_embeddings"]
    target = tmp_path / "target"
    target.mkdir()
    cfg = json.loads((folders["src"] / "target" / "config.json").read_text())
    if target_positions is not None:
        cfg["max_position_embeddings"] = target_positions
    (target / "config.json").write_text(json.dumps(cfg))
    rc, out, err = _emit(capsys, f"out={tmp_path / 'o'}", f"config={folders['conv']}", f"model={target}")
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert rc == 0, err
    if noted:
        assert len(notes) == 1 and f"max_seq_len {target_positions}" in notes[0], notes
        assert f"max_seq_len: {drafter} or less" in notes[0], notes
    else:
        assert notes == [], notes
