"""Issue 45 point 2: the compiled drafter drafts in the processes that run the model.

A default TensorRT-LLM deployment runs the model in spawned worker processes even at TP 1
(NVIDIA ``executor/executor.py`` @ ed53795b, ``GenerationExecutor.create``), told only the
architecture -> module map the serving process exports. Here each process is a fresh interpreter
(``worker_drive.py``) on TensorRT-LLM's verbatim registries (``deep/loader.py``): the serving
process imports the package as ``--custom_module_dirs`` does and exports the map and its
``sys.path``; each worker (TP 1; TP 2 as two processes on gloo) starts from a clean environment,
declares the map, resolves the target's architecture first as the model loader does, and builds the
draft model through ``get_registered_draft_model_builder``. With ``target_architecture=`` the
worker builds the package's class and drafts the float64 oracle's tokens through the spec's
lowerings; without it, TensorRT-LLM's own class (the control).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import excerpts
from harness import CONTEXT, REPO, SEED, cli, tiny_heads_override

HERE = Path(__file__).resolve().parent
#: the MiniMax-M3 target's architecture (NVIDIA _torch/models/modeling_minimaxm3.py; worker_drive.TARGET_ARCH)
TARGET_ARCH = "MiniMaxM3SparseForCausalLM"
#: one DSpark (MiniMax, Markov + confidence heads) and one DFlash drafter; the CPU lowering of every
#: layer kind overridden (the adapters' CPU default is ``dense``) so the test sees the record's lowering
#: run in the worker
ADAPTERS = ("minimax_dspark", "zlab_dflash")
LOWERING = ("adapter.attention.lowering.windowed.cpu=window_decode_merge",
            "adapter.attention.lowering.full.cpu=window_decode_merge")


def _run(role_args: dict, path: Path) -> subprocess.Popen:
    path.with_suffix(".args.json").write_text(json.dumps({**role_args, "result": str(path)}))
    # a worker inherits nothing of the parent but what TensorRT-LLM sends it: PATH to find the
    # interpreter, PYTHONPATH standing for the installed draftsmith
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(HERE / "worker_drive.py"), str(path.with_suffix(".args.json"))],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(p: subprocess.Popen, path: Path) -> dict:
    _, err = p.communicate(timeout=240)
    assert path.is_file(), f"driver died: {err[-3000:]}"
    res = json.loads(path.read_text())
    assert "fatal" not in res, f"{res['fatal']['error']}\n{res['fatal']['trace']}"
    return res


class Deployment:
    """One adapter's tiny checkpoint (4 query / 2 KV heads: TP 2), converted with the lowering
    override, its package with and without ``target_architecture``, and the float64 oracle."""

    def __init__(self, adapter: str, root: Path, src: Path):
        self.adapter, self.root, self.src = adapter, root, src
        source, self.converted = root / "source", root / "converted"
        r = cli("synth", f"adapter={adapter}", "scale=tiny", f"out={source}", f"seed={SEED}",
                tiny_heads_override(adapter, 4, 2))
        assert r.returncode == 0, r.stderr[-2000:]
        r = cli("convert", f"adapter={adapter}", f"source={source}", f"out={self.converted}", *LOWERING)
        assert r.returncode == 0, r.stderr[-2000:]
        self.packages = {}
        for name, extra in (("targeted", (f"target_architecture={TARGET_ARCH}",)), ("plain", ())):
            r = cli("emit", f"adapter={adapter}", f"out={root / name}", f"config={self.converted}", *extra)
            assert r.returncode == 0, r.stderr[-2000:]
            self.packages[name] = next(p for p in (root / name).iterdir() if (p / "__init__.py").is_file())
            self.packages[name + "_stdout"] = r.stdout
        # the target folder as a worker gets it (the LLM args' model): a MiniMax-M3 config.json
        self.target = root / "target"
        self.target.mkdir()
        (self.target / "config.json").write_text(json.dumps({"architectures": [TARGET_ARCH]}))
        (self.target / "model.safetensors").symlink_to(source / "target" / "model.safetensors")
        from safetensors.torch import load_file

        self.weights = {}
        for f in sorted(self.converted.glob("*.safetensors")):
            self.weights.update(load_file(str(f)))
        self.config = json.loads((self.converted / "config.json").read_text())
        g = torch.Generator().manual_seed(SEED + 21)
        hidden = torch.randn(CONTEXT, self.weights["fc.weight"].shape[1], generator=g).to(torch.bfloat16).float()
        anchor = int(torch.randint(0, self.config["vocab_size"], (1,), generator=g))
        self.inputs = root / "inputs.pt"
        torch.save({"hidden": hidden, "anchor": anchor}, self.inputs)
        sys.path.insert(0, str(REPO / "tests"))
        from support.oracles import draft_oracle

        tgt = load_file(str(source / "target" / "model.safetensors"))
        self.oracle_tokens, self.oracle_logits, _ = draft_oracle(self.config, self.weights, tgt, hidden, anchor)
        self.runs: dict = {}

    def serve(self, which: str) -> dict:
        key = ("serve", which)
        if key not in self.runs:
            path = self.root / f"serve-{which}.json"
            self.runs[key] = _result(_run({"role": "serve", "src": str(self.src),
                                           "package_dir": str(self.packages[which])}, path), path)
        return self.runs[key]

    def workers(self, which: str, tp: int) -> list:
        key = ("worker", which, tp)
        if key not in self.runs:
            served = self.serve(which)
            import yaml

            spec = yaml.safe_load((self.packages[which] / "speculative_config.yaml").read_text())["speculative_config"]
            init = f"file://{self.root / f'gloo-{which}-{tp}'}"
            procs = []
            for rank in range(tp):
                path = self.root / f"worker-{which}-tp{tp}-r{rank}.json"
                args = {"role": "worker", "src": str(self.src), "exported": served["exported"],
                        "sys_path": served["sys_path"], "speculative_config": spec, "target_dir": str(self.target),
                        "mapping": {"tp_size": tp, "rank": rank}, "inputs": str(self.inputs), "dist_init": init}
                procs.append((_run(args, path), path))
            self.runs[key] = [_result(p, path) for p, path in procs]
        return self.runs[key]

    def layer_lowerings(self) -> list:
        return [layer["lowering"]["cpu"] for layer in self.config["draftsmith"]["layers"]]


_DEPLOYMENTS: dict = {}


@pytest.fixture(params=ADAPTERS)
def deployment(request, tmp_path_factory):
    src = excerpts.require()
    if request.param not in _DEPLOYMENTS:
        _DEPLOYMENTS[request.param] = Deployment(request.param, tmp_path_factory.mktemp(f"p21-{request.param}"), src)
    return _DEPLOYMENTS[request.param]


def test_serving_process_exports_the_package_for_the_target_and_the_drafter(deployment):
    served = deployment.serve("targeted")
    module = f"{deployment.packages['targeted'].name}.drafter"
    drafter_arch = deployment.config["architectures"][0]
    assert served["exported"] == {TARGET_ARCH: module, drafter_arch: module}
    assert str(deployment.packages["targeted"].parent) in served["sys_path"]
    assert "worker processes: the package re-registers" in deployment.packages["targeted_stdout"]
    assert "no target_architecture= given" in deployment.packages["plain_stdout"]


@pytest.mark.parametrize("tp", [1, 2])
def test_worker_builds_and_drafts_with_the_package_class(deployment, tp):
    module = f"{deployment.packages['targeted'].name}.drafter"
    want = deployment.layer_lowerings()
    assert set(want) == {"window_decode_merge"}, want  # the override reached the record
    for rank, res in enumerate(deployment.workers("targeted", tp)):
        where = f"{deployment.adapter} tp {tp} rank {rank}"
        assert res["imported_at_start"] == [], where  # a fresh worker: nothing of the package before the map
        # the first lookup (the target's architecture) imported the package; the class is TensorRT-LLM's own
        assert res["target_class"]["module"] == module, where
        assert res["target_class"]["bases"][0] == "tensorrt_llm._torch.models.modeling_minimaxm3.MiniMaxM3ForCausalLM"
        assert res["target_class"]["name"] == "MiniMaxM3ForCausalLM" and res["target_class"]["own_attributes"] == []
        assert module in res["imported_before_builder_lookup"], where
        assert res["builder"] == f"{module}.build_draft_model", where
        assert "build" not in res and "load" not in res, f"{where}: {res.get('build') or res.get('load')}"
        assert res["drafter_class"] == f"{module}.DraftsmithDrafter", where
        draft = res["draft"]
        assert "error" not in draft, f"{where}: {draft.get('error')}\n{draft.get('trace')}"
        assert draft["lowerings_called"] == want, where
        assert draft["tokens"] == deployment.oracle_tokens.tolist(), where
        got = torch.tensor(draft["logits"], dtype=torch.float64)
        scale = float(deployment.oracle_logits.abs().max())
        assert float((got - deployment.oracle_logits).abs().max()) <= 2e-3 * max(1.0, scale), where


def test_without_target_architecture_a_worker_builds_tensorrt_llms_own_class(deployment):
    if deployment.adapter != ADAPTERS[0]:
        pytest.skip("the control runs for one adapter")
    res = deployment.workers("plain", 1)[0]
    assert res["target_class"]["module"] == "tensorrt_llm._torch.models.modeling_minimaxm3"
    assert res["imported_before_builder_lookup"] == []
    assert res["builder"].startswith("tensorrt_llm._torch.models."), res["builder"]
    assert res["drafter_class"].startswith("tensorrt_llm._torch.models."), res["drafter_class"]


def test_emit_names_the_math_tensorrt_llms_own_class_would_change(tmp_path):
    """A z-lab DFlash 2 drafter without ``target_architecture=``: the one warning line says the workers'
    own class drafts it with different math (the unary transform it does not apply); with it, no warning."""
    r = cli("emit", "adapter=zlab_dflash2", f"out={tmp_path / 'plain'}")
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stdout.splitlines() if "no target_architecture= given" in l]
    assert len(line) == 1 and line[0].startswith("warning:") and "different math" in line[0] \
        and "unary transform" in line[0], r.stdout
    r = cli("emit", "adapter=zlab_dflash", f"out={tmp_path / 'dflash'}")  # same math, not the spec's lowerings
    line = [l for l in r.stdout.splitlines() if "no target_architecture= given" in l]
    assert len(line) == 1 and line[0].startswith("note:") and "different math" not in line[0], r.stdout
    r = cli("emit", "adapter=zlab_dflash2", f"out={tmp_path / 'targeted'}", f"target_architecture={TARGET_ARCH}")
    assert r.returncode == 0 and "no target_architecture= given" not in r.stdout, r.stdout
    data = json.loads(next((tmp_path / "targeted").glob("*/resolved.json")).read_text())
    assert data["target_architecture"] == TARGET_ARCH


@pytest.mark.parametrize("value", ["DFlash2DraftModel", "not-an-identifier", "import os"])
def test_emit_refuses_a_bad_target_architecture_in_one_line(tmp_path, value):
    r = cli("emit", "adapter=zlab_dflash2", f"out={tmp_path}", f"target_architecture={value}")
    assert r.returncode == 2, r.stdout
    msg = r.stderr.strip()
    assert "\n" not in msg and "target_architecture" in msg, msg
    assert not any(tmp_path.iterdir())


def test_importing_the_package_without_tensorrt_llm_is_one_line(tmp_path):
    """Issue 47 point 5: where TensorRT-LLM is absent the import fails with one line naming it."""
    r = cli("emit", "adapter=zlab_dflash", f"out={tmp_path}")
    assert r.returncode == 0, r.stderr
    pkg = next(p for p in tmp_path.iterdir() if (p / "__init__.py").is_file())
    p = subprocess.run([sys.executable, "-c", f"import {pkg.name}"], cwd=tmp_path, capture_output=True, text=True,
                       env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}, timeout=120)
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and "tensorrt_llm" in last and "not importable" in last, p.stderr
    assert "During handling" not in p.stderr and "ModuleNotFoundError" not in p.stderr, p.stderr


def test_emit_refuses_a_record_override_on_a_converted_config(tmp_path):
    """Issue 47 point 1: ``emit config=<converted> adapter.<key>=...`` used to exit 0 and package the
    converted record unchanged; the override belongs to ``convert`` (the record TensorRT-LLM's drafter binds)."""
    src, conv = tmp_path / "src", tmp_path / "conv"
    assert cli("synth", "adapter=zlab_dflash", "scale=tiny", f"out={src}", f"seed={SEED}").returncode == 0
    assert cli("convert", "adapter=zlab_dflash", f"source={src}", f"out={conv}").returncode == 0
    arg = "adapter.attention.lowering.full.sm100=trtllm_gen"
    r = cli("emit", "adapter=zlab_dflash", f"out={tmp_path / 'out'}", f"config={conv}", arg)
    msg = r.stderr.strip()
    assert r.returncode == 2 and "\n" not in msg and arg in msg and "draftsmith convert" in msg, (r.stdout, msg)
    assert not (tmp_path / "out").exists()
    r = cli("convert", "adapter=zlab_dflash", f"source={src}", f"out={tmp_path / 'conv2'}", arg)
    assert r.returncode == 0, r.stderr
    r = cli("emit", "adapter=zlab_dflash", f"out={tmp_path / 'out2'}", f"config={tmp_path / 'conv2'}")
    assert r.returncode == 0, r.stderr
    data = json.loads(next((tmp_path / "out2").glob("*/resolved.json")).read_text())
    assert {l["lowering"]["sm100"] for l in data["resolved"]["layers"]} == {"trtllm_gen"}
