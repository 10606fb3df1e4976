"""``draftsmith emit``: the package it writes, audited and run against the torch host.

The emitted text is checked statically (compiles, header names the adapter file and its
sha256, readable, every TensorRT-LLM name it uses is listed in docs/trtllm-interface.md)
and dynamically: emitted against the torch reference host with stand-in registries, its
drafter class drafts the same tokens as the host's own class. Never run inside TensorRT-LLM.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import importlib
import json
import py_compile
import re
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from draftsmith.framework.ownership import MARKER
import torch

from draftsmith.framework.emit import (
    EngineNames,
    derive_max_draft_len,
    resolve_max_draft_len,
    write_package,
)
from draftsmith.framework.errors import UserError
from draftsmith.framework.hosts import DFlashDraftModel
from test_host import BLOCK, build, make_config, make_target, make_weights, rand_hidden

DOC = Path(__file__).resolve().parents[1] / "docs" / "trtllm-interface.md"
ARCH = "DSparkDraftModel"
TRTLLM = EngineNames(backbone="tensorrt_llm._torch.models.modeling_minimaxm3:MiniMaxM3ForCausalLM")


# ---- helpers ------------------------------------------------------------------------------------


class FakeAdapter:
    """The part of ``engine.Adapter`` emission and the binding use; configs are already flat."""

    def __init__(self, config: dict, name: str = "tiny_dspark"):
        self.name, self.architectures = name, [ARCH]
        self.spec = SimpleNamespace(synth=SimpleNamespace(config=config), docs=SimpleNamespace(serving={}))
        self.converted: list[set] = []

    def flatten_config(self, raw: dict) -> dict:
        return dict(raw)

    def matches(self, raw: dict) -> bool:
        return ARCH in (raw.get("architectures") or [])

    def convert_state_dict(self, tensors: dict, config: dict) -> dict:
        self.converted.append(set(tensors))
        return {k.removeprefix("src."): v for k, v in tensors.items()}


def adapter_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_dspark.yaml"
    path.write_text("name: tiny_dspark\n# stands in for the adapter file\n")
    return path


def doc_names() -> set[str]:
    """First-column names of the table under '## Names the emitted module touches'."""
    text = DOC.read_text()
    section = text.split("## Names the emitted module touches", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", section, re.M)}


def engine_names_used(source: str, roots=("tensorrt_llm",)) -> set[str]:
    """Every engine name the module touches: imports, attribute reads on them, and the
    base-class methods/attributes a subclass overrides, calls through ``super()`` or reads
    on ``self`` (``draftsmith_*`` members are draftsmith's own and exempt)."""
    tree = ast.parse(source)
    bound, used = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in roots:
            for a in node.names:
                bound[a.asname or a.name] = f"{node.module}.{a.name}"
                used.add(f"{node.module}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in roots:
                    bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    used.add(a.name)

    def chain(node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        return (node.id, parts[::-1]) if isinstance(node, ast.Name) else (None, None)

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            head, parts = chain(node)
            if head in bound:
                used.add(".".join([bound[head], *parts]))
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for base in (bound[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in bound):
            short = base.rsplit(".", 1)[-1]
            own = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
            used |= {f"{short}.{m}" for m in own if not m.startswith("draftsmith_")}
            for node in ast.walk(cls):
                if not isinstance(node, ast.Attribute) or node.attr.startswith("draftsmith_"):
                    continue
                v = node.value
                if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
                    used.add(f"{short}.{node.attr}")
                elif isinstance(v, ast.Name) and v.id == "self" and node.attr not in own:
                    used.add(f"{short}.{node.attr}")
    return used


def install_fake_engine(monkeypatch, prefix: str):
    """Stand-ins for the registry, the spec-mode enum and the config loader module."""

    class SpeculativeDecodingMode(enum.Enum):
        DFLASH = 1
        DSPARK = 2

    calls = {"auto": {}, "draft": {}}
    previous = lambda *a: ("previous builder", a)  # noqa: E731
    registry = types.ModuleType(f"{prefix}_registry")

    def register_auto_model(name):
        return lambda cls: calls["auto"].setdefault(name, cls)

    def register_draft_model(mode):
        return lambda fn: calls["draft"].setdefault(mode, fn)

    registry.register_auto_model = register_auto_model
    registry.register_draft_model = register_draft_model
    registry.get_registered_draft_model_builder = lambda mode: previous
    spec = types.ModuleType(f"{prefix}_spec")
    spec.SpeculativeDecodingMode = SpeculativeDecodingMode
    cfg = types.ModuleType(f"{prefix}_config_utils")
    cfg.load_pretrained_config = lambda path, *a, **k: ("original loader", str(path))
    for m in (registry, spec, cfg):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    names = EngineNames(
        base="draftsmith.framework.hosts:DFlashDraftModel",
        registry_module=registry.__name__,
        spec_mode_module=spec.__name__,
        config_utils_module=cfg.__name__,
        backbone=None,
    )
    return names, calls, previous, cfg, SpeculativeDecodingMode


def import_package(monkeypatch, out: Path, package: str):
    monkeypatch.syspath_prepend(str(out))
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    return importlib.import_module(package)


# ---- max_draft_len --------------------------------------------------------------------------------


def test_max_draft_len_derivation():
    assert derive_max_draft_len(7, True) == 7
    assert derive_max_draft_len(7, False) == 6
    flat = make_config(sfa=True)
    assert resolve_max_draft_len(flat)[0] == BLOCK
    assert resolve_max_draft_len(make_config(sfa=False))[0] == BLOCK - 1
    no_dspark = {k: v for k, v in make_config(sfa=False).items() if k not in ("dspark_config", "draftsmith")}
    assert resolve_max_draft_len(no_dspark)[0] == BLOCK - 1  # DFlash: slot 0 is only the anchor
    anchor_default = make_config(sfa=True)
    del anchor_default["dspark_config"]["sample_from_anchor"]
    assert resolve_max_draft_len(anchor_default)[0] == BLOCK  # DSpark default


def test_contradicting_max_draft_len_is_refused(tmp_path):
    with pytest.raises(UserError, match="contradicts the derived max_draft_len 4"):
        resolve_max_draft_len(make_config(sfa=True), explicit=3)
    bad = make_config(sfa=True)
    bad["draftsmith"]["max_draft_len"] = 3
    with pytest.raises(UserError, match="config draftsmith.max_draft_len = 3"):
        write_package(FakeAdapter(bad), adapter_file(tmp_path), tmp_path / "out", TRTLLM)
    with pytest.raises(UserError, match="adapter spec max_draft_len = 5"):
        write_package(FakeAdapter(make_config()), adapter_file(tmp_path), tmp_path / "out", TRTLLM,
                      explicit_max_draft_len=5)
    assert not (tmp_path / "out").exists()


# ---- the emitted text -------------------------------------------------------------------------------


def test_emitted_text_header_compiles_and_snippet(tmp_path):
    yaml = adapter_file(tmp_path)
    res = write_package(FakeAdapter(make_config()), yaml, tmp_path / "out", TRTLLM)
    sha = hashlib.sha256(yaml.read_bytes()).hexdigest()
    assert res.sha256 == sha and res.max_draft_len == BLOCK and res.architecture == ARCH
    src = (res.package_dir / "drafter.py").read_text()
    head = src.split('"""')[1]
    assert f"adapter file: {yaml.resolve()}" in head and f"adapter sha256: {sha}" in head
    for f in ("drafter.py", "__init__.py"):
        text = (res.package_dir / f).read_text()
        compile(text, f, "exec")
        assert all(len(line) <= 100 for line in text.splitlines() if str(yaml.resolve()) not in line), f
        assert "\n\n\n\n" not in text and not re.search(r"[ \t]+$", text, re.M), f
    # no conversion logic in the text: it delegates to the adapter binding
    assert "ADAPTER.convert(weights, self.config)" in src and "rename" not in src
    snippet = (res.package_dir / "speculative_config.yaml").read_text()
    assert "decoding_type: DSpark" in snippet and f"max_draft_len: {BLOCK}" in snippet
    assert res.speculative_config == snippet and snippet.rstrip() in res.summary()
    paste = (res.package_dir / "PASTE.md").read_text()
    assert f'"{ARCH}": "modeling_draftsmith_tiny_dspark",' in paste and f'"{ARCH}",' in paste


def test_re_emit_replaces_whole_and_a_failed_emit_leaves_the_old_package(tmp_path, monkeypatch):
    import draftsmith.framework.emit as emit_mod

    yaml, out = adapter_file(tmp_path), tmp_path / "out"
    res = write_package(FakeAdapter(make_config()), yaml, out, TRTLLM)
    (res.package_dir / "stray.txt").write_text("left by hand")
    before = {p.name: p.read_bytes() for p in res.package_dir.iterdir()}
    assert "stray.txt" in before and "__pycache__" not in before

    def broken(*a, **k):
        raise py_compile.PyCompileError(SyntaxError, SyntaxError("poisoned"), "drafter.py")

    monkeypatch.setattr(emit_mod.py_compile, "compile", broken)
    with pytest.raises(py_compile.PyCompileError):
        write_package(FakeAdapter(make_config()), yaml, out, TRTLLM)
    assert {p.name: p.read_bytes() for p in res.package_dir.iterdir()} == before
    assert sorted(p.name for p in out.iterdir()) == [res.package_dir.name]  # no temp dir left
    monkeypatch.undo()
    res2 = write_package(FakeAdapter(make_config()), yaml, out, TRTLLM)
    assert sorted(p.name for p in res2.package_dir.iterdir()) == sorted([f.name for f in res2.files] + [MARKER])


def test_emitted_module_uses_only_documented_trtllm_names(tmp_path):
    res = write_package(FakeAdapter(make_config()), adapter_file(tmp_path), tmp_path / "out", TRTLLM)
    allowed = doc_names()
    assert allowed, "docs/trtllm-interface.md lists no names"
    for f in ("drafter.py", "__init__.py"):
        used = engine_names_used((res.package_dir / f).read_text())
        if f == "drafter.py":
            assert "tensorrt_llm._torch.models.modeling_dspark.GQADSparkForCausalLM" in used
            assert "GQADSparkForCausalLM.load_weights" in used
        unknown = {n for n in used if n not in allowed and not any(a.startswith(n + ".") for a in allowed)}
        assert not unknown, f"{f} uses TensorRT-LLM names not in {DOC.name}: {sorted(unknown)}"


def test_audit_catches_an_undocumented_name():
    src = (
        "from tensorrt_llm._torch.models.modeling_dspark import GQADSparkForCausalLM\n"
        "from tensorrt_llm.secret import thing\n"
        "class D(GQADSparkForCausalLM):\n"
        "    def forward(self):\n"
        "        return super().dflash_forward(self.model, self.draftsmith_x)\n"
    )
    used = engine_names_used(src)
    assert {"tensorrt_llm.secret.thing", "GQADSparkForCausalLM.forward",
            "GQADSparkForCausalLM.dflash_forward", "GQADSparkForCausalLM.model"} <= used
    assert not any("draftsmith_x" in n for n in used)


# ---- run against the torch host ---------------------------------------------------------------------


def test_emitted_drafter_drafts_like_the_host(tmp_path, monkeypatch):
    names, calls, previous, _, mode = install_fake_engine(monkeypatch, "fake_trtllm_a")
    config = make_config()
    out = tmp_path / "out"
    res = write_package(FakeAdapter(config), adapter_file(tmp_path), out, names, package="emitted_a")
    pkg = import_package(monkeypatch, out, res.package)
    cls = pkg.TinyDsparkDrafter
    assert issubclass(cls, DFlashDraftModel) and pkg.MAX_DRAFT_LEN == BLOCK
    assert calls["draft"][mode.DSPARK] is pkg.build_draft_model and not calls["auto"]

    weights, target = make_weights(config, seed=3), make_target()
    host = build(config, weights, target)
    emitted = cls(config, device="cpu", dtype=torch.float32)
    emitted.load_weights(weights)  # converted checkpoint: passes through to the host loader
    emitted.load_weights_from_target_model(host_target(target))
    for model in (host, emitted):
        cache = model.make_cache(2, page_size=4, max_context=32)
        model.append_context(cache, rand_hidden(9, seed=1), seq=0)
        model.append_context(cache, rand_hidden(20, seed=2), seq=1)
        model.draft_out = model.draft(torch.tensor([5, 60]), cache)
    assert emitted.draft_out.tokens.tolist() == host.draft_out.tokens.tolist()
    torch.testing.assert_close(emitted.draft_out.logits, host.draft_out.logits)

    for i in range(config["num_hidden_layers"]):
        assert emitted._get_attention_mask_args(i) == host._get_attention_mask_args(i)
    assert emitted.validate_block_attention_windows() == host.layer_lowerings == ["dense"] * 3
    assert emitted.draftsmith_needs_context_kernel is False
    other = SimpleNamespace(pretrained_config=SimpleNamespace(architectures=["SomethingElse"]))
    assert pkg.build_draft_model("mc", other, None, None) == ("previous builder", ("mc", other, None, None))


def host_target(target):
    class T:
        pass

    t = T()
    t.model = T()
    t.model.embed_tokens = torch.nn.Embedding.from_pretrained(target["model.embed_tokens.weight"])
    t.lm_head = torch.nn.Linear(*reversed(target["lm_head.weight"].shape), bias=False)
    t.lm_head.weight.data = target["lm_head.weight"].clone()
    return t


def test_source_layout_weights_are_converted_first(tmp_path, monkeypatch):
    names, *_ = install_fake_engine(monkeypatch, "fake_trtllm_b")
    config = make_config()
    fake = FakeAdapter(config)
    out = tmp_path / "out"
    res = write_package(fake, adapter_file(tmp_path), out, names, package="emitted_b")
    pkg = import_package(monkeypatch, out, res.package)
    pkg.ADAPTER.__dict__["adapter"] = fake  # the compiled adapter, without a real spec file
    routed = dict(config, draftsmith_tensors="source")
    emitted = pkg.TinyDsparkDrafter(routed, device="cpu", dtype=torch.float32)
    weights = make_weights(config)
    emitted.load_weights({"src." + k: v for k, v in weights.items()})
    assert fake.converted and all(n.startswith("src.") for n in fake.converted[0])
    torch.testing.assert_close(emitted.fc.weight, weights["fc.weight"])


def test_config_route(tmp_path, monkeypatch):
    names, _, _, cfg_mod, _ = install_fake_engine(monkeypatch, "fake_trtllm_c")
    raw = {k: v for k, v in make_config().items() if k != "draftsmith"}
    fake = FakeAdapter(make_config())
    fake.flatten_config = lambda r: dict(make_config(), **{k: r[k] for k in r})
    out = tmp_path / "out"
    res = write_package(fake, adapter_file(tmp_path), out, names, package="emitted_c")
    pkg = import_package(monkeypatch, out, res.package)
    pkg.ADAPTER.__dict__["adapter"] = fake
    routed = pkg.route_config(raw)
    assert routed["draftsmith"]["layers"] and routed["draftsmith_tensors"] == "source"
    assert pkg.route_config(dict(raw, architectures=["Other"])) is None
    assert pkg.route_config(make_config()) is None  # already converted: nothing to route

    fake_tf = types.ModuleType("transformers")
    fake_tf.PretrainedConfig = SimpleNamespace(from_dict=lambda d: ("flattened", d))
    monkeypatch.setitem(sys.modules, "transformers", fake_tf)
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for d, c in ((ours, raw), (theirs, dict(raw, architectures=["Other"]))):
        d.mkdir()
        (d / "config.json").write_text(json.dumps(c))
    pkg.install_config_route()
    kind, flat = cfg_mod.load_pretrained_config(str(ours))
    assert kind == "flattened" and flat["draftsmith_tensors"] == "source"
    assert cfg_mod.load_pretrained_config(str(theirs)) == ("original loader", str(theirs))


def test_stale_adapter_file_is_refused(tmp_path, monkeypatch):
    names, *_ = install_fake_engine(monkeypatch, "fake_trtllm_d")
    yaml = adapter_file(tmp_path)
    out = tmp_path / "out"
    res = write_package(FakeAdapter(make_config()), yaml, out, names, package="emitted_d")
    pkg = import_package(monkeypatch, out, res.package)
    yaml.write_text(yaml.read_text() + "# edited after emission\n")
    with pytest.raises(UserError, match="re-run `draftsmith emit`"):
        pkg.ADAPTER.adapter


# ---- the real adapter (once it exists) ---------------------------------------------------------------


def test_emit_minimax_dspark(tmp_path):
    loading = pytest.importorskip("draftsmith.framework.loading")
    from draftsmith.framework.emit import emit

    try:
        loading.load_spec("minimax_dspark")
    except Exception as e:  # the adapter file is not written yet
        pytest.skip(f"minimax_dspark adapter not available: {e}")
    res = emit("minimax_dspark", target="trtllm", out=tmp_path / "out")
    assert res.max_draft_len == 7 and res.architecture == "DSparkMiniMaxDraftModel"
    assert res.sha256 == hashlib.sha256(res.adapter_file.read_bytes()).hexdigest()
    src = (res.package_dir / "drafter.py").read_text()
    allowed = doc_names()
    unknown = {n for n in engine_names_used(src) if n not in allowed
               and not any(a.startswith(n + ".") for a in allowed)}
    assert not unknown
    with pytest.raises(UserError, match="unknown; known: trtllm"):
        emit("minimax_dspark", target="vllm", out=tmp_path / "x")


def test_raw_checkpoint_through_emitted_class_matches_converted_on_host(tmp_path, monkeypatch):
    """Real adapter, tiny synthetic source checkpoint: the emitted class converts in memory
    (routed config, ``load_weights``); the host class loads the ``convert`` output."""
    from draftsmith.framework.convert import execute
    from draftsmith.framework.emit import emit
    from draftsmith.framework.engine import load_adapter
    from draftsmith.framework.hosts import BorrowedTarget
    from draftsmith.framework.hosts.loading import build_drafter, read_checkpoint
    from draftsmith.framework.synth import synthesize

    try:
        adapter = load_adapter("minimax_dspark")
    except Exception as e:
        pytest.skip(f"minimax_dspark adapter not available: {e}")
    src, conv = tmp_path / "src", tmp_path / "conv"
    synthesize(adapter, "tiny", src, seed=0)
    execute(adapter.plan(src), conv, progress=False)
    host, _ = build_drafter(DFlashDraftModel, conv, src / "target")

    names, *_ = install_fake_engine(monkeypatch, "fake_trtllm_e")
    res = emit("minimax_dspark", out=tmp_path / "out", base_module="draftsmith.framework.hosts",
               base_class="DFlashDraftModel", registry_module=names.registry_module,
               spec_mode_module=names.spec_mode_module, config_utils_module=names.config_utils_module,
               backbone=None, package="emitted_e")
    pkg = import_package(monkeypatch, tmp_path / "out", res.package)
    raw_config, raw_tensors = read_checkpoint(src)
    routed = pkg.route_config(raw_config)
    assert routed is not None and routed["draftsmith"] == host.config["draftsmith"]
    emitted = pkg.MinimaxDsparkDrafter(routed)
    emitted.load_weights(raw_tensors)
    emitted.load_weights_from_target_model(BorrowedTarget(src / "target", dtype=emitted.dtype))

    hidden_size = host.fc.weight.shape[1]
    g = torch.Generator().manual_seed(0)
    ctx = [torch.randn(n, hidden_size, generator=g) for n in (5, 40)]
    for model in (host, emitted):
        cache = model.make_cache(2, page_size=16, max_context=64)
        for seq, h in enumerate(ctx):
            model.append_context(cache, h, seq=seq)
        model.draft_out = model.draft(torch.tensor([3, 17]), cache)
    assert emitted.draft_out.tokens.tolist() == host.draft_out.tokens.tolist()
    torch.testing.assert_close(emitted.draft_out.logits, host.draft_out.logits, rtol=0, atol=0)
    assert emitted.validate_block_attention_windows() == host.layer_lowerings


def test_cli_records_overrides_and_the_binding_reproduces_them(tmp_path, capsys):
    from draftsmith.framework.cli import main
    from draftsmith.framework.hosts.trtllm import AdapterBinding

    if not (Path(__file__).resolve().parents[1] / "adapters" / "minimax_dspark.yaml").exists():
        pytest.skip("minimax_dspark adapter not available")
    args = ["emit", "adapter=minimax_dspark", "target=trtllm", f"out={tmp_path}", "adapter.attention.window=2048",
            "adapter.attention.lowering.windowed.sm100=trtllm_gen"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "max_draft_len = 7" in printed and "decoding_type: DSpark" in printed
    src = (tmp_path / "draftsmith_minimax_dspark" / "drafter.py").read_text()
    assert "non-causal, window 2048 -> sm100 trtllm_gen" in src
    call = next(n.value for n in ast.parse(src).body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "ADAPTER")
    binding = AdapterBinding(**{k.arg: ast.literal_eval(k.value) for k in call.keywords})
    assert binding.overrides == ["attention.lowering.windowed.sm100=\"trtllm_gen\"", "attention.window=2048"]
    assert binding.adapter.spec.attention.window == 2048  # spec sha256 checked on load
    assert binding.adapter.spec.attention.lowering["windowed"].sm100 == "trtllm_gen"
    assert main(["emit", "adapter=minimax_dspark", "target=vllm", f"out={tmp_path}"]) == 2


def test_register_at_runtime(tmp_path, monkeypatch):
    """No engine: nothing happens. With one (stand-in registries): emitted, imported, registered."""
    from draftsmith.framework.emit import register_at_runtime

    assert register_at_runtime("minimax_dspark", cache_dir=tmp_path / "none") is None
    assert not (tmp_path / "none").exists()
    names, calls, *_ = install_fake_engine(monkeypatch, "fake_trtllm_rt")
    pkg = register_at_runtime("minimax_dspark", cache_dir=tmp_path / "cache", base_module="draftsmith.framework.hosts",
                              base_class="DFlashDraftModel", registry_module=names.registry_module,
                              spec_mode_module=names.spec_mode_module,
                              config_utils_module=names.config_utils_module, backbone=None,
                              package="emitted_rt")
    try:
        assert pkg.__name__ == "emitted_rt" and calls["draft"], "the DSpark builder was not registered"
        assert any(p.name.startswith("minimax_dspark-") for p in (tmp_path / "cache").iterdir())
    finally:
        for name in [n for n in sys.modules if n.startswith("emitted_rt")]:
            monkeypatch.delitem(sys.modules, name)
        sys.path[:] = [p for p in sys.path if not p.startswith(str(tmp_path))]
