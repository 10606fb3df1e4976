"""Issue 40, "Code execution" list: no spec, source config or converted config string becomes code.

Each payload is planted where it used to reach the emitted Python (a spec through
``adapter_dir`` or an override, a source ``config.json`` through ``draftsmith init`` ->
``emit``, a converted ``config.json``'s ``draftsmith.layers[i].lowering.*``,
``engine.trtllm_backbone`` / ``backbone=``, ``docs.serving`` keys); ``emit`` must exit 2 with
one line, write nothing, and importing any package emitted (or one whose ``resolved.json`` was
tampered with afterwards) must create no marker file. The package's Python is the same fixed
text for every adapter.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from draftsmith.framework.cli.main import main
from draftsmith.framework.emit.fixed import PYTHON_FILES
from draftsmith.framework.spec.loading import adapter_files
from support.helpers import emit_refusal
from support.trtllm_shim import fake_trtllm  # noqa: F401  (fixture)


def code(marker: Path) -> str:
    """A payload that creates ``marker`` if it ever runs as Python (closing a docstring, a string, a line)."""
    return f'X"""\nopen({str(marker)!r}, "w").close()\n"""'


def payloads(marker: Path) -> list[str]:
    m = repr(str(marker))
    return [code(marker), f"X'\nopen({m}, 'w').close()#", f"X\nopen({m}, 'w').close()", f"__import__('os').system('touch {marker}')"]


def run_emit(capsys, *args) -> tuple[int, str, str]:
    rc = main(["emit", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def assert_refused(rc, err, out_dir: Path, marker: Path):
    lines = [l for l in err.splitlines() if l.strip()]
    assert rc == 2 and len(lines) == 1, (rc, err)
    assert "Traceback" not in err
    assert not marker.exists()
    assert not out_dir.exists() or not any(out_dir.iterdir()), list(out_dir.iterdir())


def hostile_spec(adapter_dir: Path, name: str, architecture: str = "DSparkMiniMaxDraftModel",
                 serving: dict | None = None, backbone: str | None = None) -> None:
    """minimax_dspark's YAML under ``name`` with ``architecture`` in match and synth, ``serving``
    as docs.serving and ``backbone`` as engine.trtllm_backbone (JSON is YAML)."""
    text = adapter_files()["minimax_dspark"].read_text()
    text = text.replace("name: minimax_dspark", f"name: {name}").replace("  reference_example: true", "")
    text = text.replace("[DSparkMiniMaxDraftModel]", json.dumps([architecture]))
    if serving is not None:
        text = text.replace("  serving: {decoding_type: DSpark, speculative_model: <checkpoint>/dspark}",
                            f"  serving: {json.dumps(serving)}")
        assert json.dumps(serving) in text
    if backbone is not None:
        text = text.replace("  trtllm_backbone: generated", f"  trtllm_backbone: {json.dumps(backbone)}")
        assert json.dumps(backbone) in text
    adapter_dir.mkdir(parents=True, exist_ok=True)
    (adapter_dir / f"{name}.yaml").write_text(text)


@pytest.mark.parametrize("which", range(4))
def test_architecture_payload_in_a_spec(tmp_path, capsys, which):
    marker = tmp_path / "MARKER"
    hostile_spec(tmp_path / "adapters", "hostile", payloads(marker)[which])
    rc, out, err = run_emit(capsys, "adapter=hostile", f"adapter_dir={tmp_path / 'adapters'}", f"out={tmp_path / 'out'}")
    assert_refused(rc, err, tmp_path / "out", marker)
    assert "architectures" in err


def test_architecture_payload_in_a_source_config_through_init(tmp_path, capsys, checkpoints):
    """``init`` copies ``architectures`` verbatim; ``emit`` of the spec it wrote refuses it."""
    marker = tmp_path / "MARKER"
    ck = checkpoints("minimax_dspark")
    src = tmp_path / "src"
    shutil.copytree(ck.synth.path, src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["architectures"] = [code(marker)]
    (src / "config.json").write_text(json.dumps(cfg))
    spec = tmp_path / "adapters" / "from_init.yaml"
    spec.parent.mkdir()
    assert main(["init", f"source={src}", f"out={spec}"]) == 0
    capsys.readouterr()
    rc, out, err = run_emit(capsys, "adapter=from_init", f"adapter_dir={spec.parent}", f"out={tmp_path / 'out'}")
    assert_refused(rc, err, tmp_path / "out", marker)


def converted_config(tmp_path: Path, mutate) -> Path:
    from support.host_case import make_config

    cfg = make_config()
    cfg["draftsmith"]["adapter"] = "minimax_dspark"
    mutate(cfg)
    folder = tmp_path / "converted"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize("device", ["cpu", "sm90"])
def test_lowering_payload_in_a_converted_config(tmp_path, capsys, device):
    marker = tmp_path / "MARKER"

    def plant(cfg):
        cfg["draftsmith"]["layers"][1]["lowering"][device] = code(marker)

    folder = converted_config(tmp_path, plant)
    rc, out, err = run_emit(capsys, "adapter=minimax_dspark", f"config={folder}", f"out={tmp_path / 'out'}")
    assert_refused(rc, err, tmp_path / "out", marker)
    assert "lowering" in err


def test_unregistered_lowering_name_in_a_converted_config(tmp_path, capsys):
    folder = converted_config(tmp_path, lambda c: c["draftsmith"]["layers"][0]["lowering"].update(cpu="not_one"))
    rc, out, err = run_emit(capsys, "adapter=minimax_dspark", f"config={folder}", f"out={tmp_path / 'out'}")
    assert_refused(rc, err, tmp_path / "out", tmp_path / "MARKER")
    assert "not a registered lowering" in err


@pytest.mark.parametrize("backbone", ["os:system", "tensorrt_llm.x\nimport os:Y", "tensorrt_llm._torch.a:B\nimport os",
                                      "builtins:exec", "tensorrt_llm..x:Y", "tensorrt_llm.x:Y.__class__"])
def test_backbone_payloads(tmp_path, capsys, backbone):
    marker = tmp_path / "MARKER"
    rc, out, err = run_emit(capsys, "adapter=minimax_dspark", f"backbone={backbone}", f"out={tmp_path / 'out'}")
    assert_refused(rc, err, tmp_path / "out", marker)
    assert "backbone" in err
    hostile_spec(tmp_path / "adapters", "hostile", backbone=backbone)
    rc, out, err = run_emit(capsys, "adapter=hostile", f"adapter_dir={tmp_path / 'adapters'}", f"out={tmp_path / 'out2'}")
    assert_refused(rc, err, tmp_path / "out2", marker)
    assert "backbone" in err


@pytest.mark.parametrize("serving", [
    {"x\nmax_draft_len: 99": 1},
    {"max_draft_len": 99},
    {"speculative_config": {"max_draft_len": 99}},
    {"trust_remote_code": True},
    {"decoding_type": "DFlash"},
    {"block_size": 3},
    {"mask_token_id\n": 5},
])
def test_serving_payloads(tmp_path, capsys, serving):
    hostile_spec(tmp_path / "adapters", "hostile", serving=serving)
    rc, out, err = run_emit(capsys, "adapter=hostile", f"adapter_dir={tmp_path / 'adapters'}", f"out={tmp_path / 'out'}")
    assert_refused(rc, err, tmp_path / "out", tmp_path / "MARKER")
    assert "docs.serving" in err


def test_serving_strings_are_data_in_the_yaml(tmp_path, capsys):
    """A value with newlines and YAML syntax stays one string value; speculative_model in docs.serving
    never replaces the snippet's."""
    import yaml

    value = "x\nmax_draft_len: 99\ntrust_remote_code: true"
    serving = {"load_format": value, "speculative_model": "/evil\nmax_draft_len: 1"}
    hostile_spec(tmp_path / "adapters", "hostile", serving=serving)
    rc, out, err = run_emit(capsys, "adapter=hostile", f"adapter_dir={tmp_path / 'adapters'}", f"out={tmp_path / 'out'}")
    assert rc == 0, err
    doc = yaml.safe_load((tmp_path / "out" / "draftsmith_hostile" / "speculative_config.yaml").read_text())
    assert set(doc) == {"speculative_config"}
    sc = doc["speculative_config"]
    assert sc["load_format"] == value and sc["max_draft_len"] == 7 and "trust_remote_code" not in sc
    assert "evil" not in sc["speculative_model"]


def test_every_package_has_the_same_fixed_python(tmp_path, capsys):
    for name in [n for n in adapter_files() if not emit_refusal(n)]:  # refused ones: test_dflash2_drafter
        rc, out, err = run_emit(capsys, f"adapter={name}", f"out={tmp_path / name}")
        assert rc == 0, err
        pkg = next((tmp_path / name).iterdir())
        for fname, text in PYTHON_FILES.items():
            assert (pkg / fname).read_text() == text, (name, fname)
        assert sorted(p.name for p in pkg.iterdir() if p.suffix == ".py") == sorted(PYTHON_FILES)


@pytest.mark.parametrize("field,value", [
    ("architecture", None), ("package", None), ("decoding_type", "DSpark\nimport os"), ("backbone", "os:system"),
    ("lowering", None), ("adapter", "x\nimport os"),
])
def test_a_tampered_resolved_json_is_refused_at_import_before_tensorrt_llm(tmp_path, capsys, monkeypatch, field, value):
    """The package validates its data first: nothing of it runs, and tensorrt_llm is not even imported."""
    marker = tmp_path / "MARKER"
    from draftsmith.framework.emit.render import emit

    pkg = emit("minimax_dspark", out=tmp_path / "out", package="draftsmith_tampered").package_dir
    data = json.loads((pkg / "resolved.json").read_text())
    value = code(marker) if value is None else value
    if field == "lowering":
        data["resolved"]["layers"][0]["lowering"]["cpu"] = value
    else:
        data[field] = value
    (pkg / "resolved.json").write_text(json.dumps(data))
    monkeypatch.syspath_prepend(str(pkg.parent))
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # importing it would raise ImportError
    with pytest.raises(ValueError) as e:
        importlib.import_module("draftsmith_tampered")
    assert "\n" not in str(e.value) and not marker.exists()
    for name in [n for n in sys.modules if n.startswith("draftsmith_tampered")]:
        del sys.modules[name]


def test_importing_every_emitted_package_creates_no_marker(tmp_path, capsys, monkeypatch, fake_trtllm):  # noqa: F811
    """Every shipped adapter's package imports inside the TensorRT-LLM fake and registers; no marker."""
    from draftsmith.framework.emit.render import emit

    marker = tmp_path / "MARKER"
    for name in [n for n in adapter_files() if not emit_refusal(n)]:
        ns_before = dict(fake_trtllm.MODEL_CLASS_MAPPING)
        pkg_name = f"draftsmith_imp_{name}"
        emit(name, out=tmp_path / "out", package=pkg_name)
        monkeypatch.syspath_prepend(str(tmp_path / "out"))
        try:
            mod = importlib.import_module(pkg_name)
        except ImportError as e:  # two shipped adapters share an architecture: refused in one line
            assert "already registered" in str(e) and "\n" not in str(e), str(e)
            continue
        finally:
            for n in [n for n in sys.modules if n.startswith(pkg_name)]:
                del sys.modules[n]
        assert mod.ARCHITECTURE in fake_trtllm.MODEL_CLASS_MAPPING and mod.ARCHITECTURE not in ns_before
    assert not marker.exists()


@pytest.mark.parametrize("backbone", ["os:system", "builtins:exec", "subprocess:Popen"])
def test_backbone_payload_through_a_command_line_override(tmp_path, capsys, backbone):
    rc, out, err = run_emit(capsys, "adapter=minimax_dspark", f"adapter.engine.trtllm_backbone={backbone}",
                            f"out={tmp_path / 'out'}")
    assert_refused(rc, err, tmp_path / "out", tmp_path / "MARKER")
    assert "must come from a TensorRT-LLM module" in err
