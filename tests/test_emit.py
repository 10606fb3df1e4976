"""``draftsmith emit``: the package it writes, audited statically.

What the package does inside TensorRT-LLM (builder, backbone, masks in every process, block
decode through the lowerings, version floor, raw-checkpoint refusal, portability) is checked
by tests/conformance/trtllm against a stand-in written from TensorRT-LLM's source. Here: the
text compiles, names only TensorRT-LLM names documented in docs/trtllm-interface.md, states
no path or hash, carries the resolved drafter as data, and states the right snippet.
"""

from __future__ import annotations

import ast
import json
import py_compile
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from draftsmith.framework.io.ownership import MARKER
from draftsmith.framework.compile.resolved import ResolvedDrafter as R
from draftsmith.framework.compile.resolved import max_draft_len_rule
from draftsmith.framework.emit.binding import PackagedDrafter, check_engine_version, version_key
from draftsmith.framework.emit.render import (
    EngineNames,
    decoding_type,
    resolve_max_draft_len,
    write_package,
)
from draftsmith.framework.errors import UserError
from test_host import BLOCK, make_config

DOC = Path(__file__).resolve().parents[1] / "docs" / "trtllm-interface.md"
ARCH = "DSparkDraftModel"
TRTLLM = EngineNames()


# ---- helpers ------------------------------------------------------------------------------------


class FakeAdapter:
    """The part of ``engine.Adapter`` emission and the binding use; configs are already flat."""

    def __init__(self, config: dict, name: str = "tiny_dspark"):
        self.name, self.architectures = name, [ARCH]
        self.spec = SimpleNamespace(synth=SimpleNamespace(config=config), docs=SimpleNamespace(serving={}))

    def flatten_config(self, raw: dict) -> dict:
        return dict(raw)



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


# ---- max_draft_len --------------------------------------------------------------------------------


def test_max_draft_len_derivation():
    assert max_draft_len_rule(7, True) == 7
    assert max_draft_len_rule(7, False) == 6
    with pytest.raises(UserError, match="leaves no slot to draft"):
        max_draft_len_rule(1, False)
    flat = make_config(sfa=True)
    assert resolve_max_draft_len(flat)[0] == BLOCK
    assert resolve_max_draft_len(make_config(sfa=False))[0] == BLOCK - 1
    # the compiled section decides; the raw dspark_config is not read again
    no_dspark = {k: v for k, v in make_config(sfa=False).items() if k != "dspark_config"}
    assert resolve_max_draft_len(no_dspark)[0] == BLOCK - 1
    no_section = {k: v for k, v in make_config(sfa=False).items() if k != "draftsmith"}
    with pytest.raises(UserError, match="no draftsmith section"):
        resolve_max_draft_len(no_section)


def test_contradicting_max_draft_len_is_refused(tmp_path):
    with pytest.raises(UserError, match="contradicts the derived max_draft_len 4"):
        resolve_max_draft_len(make_config(sfa=True), explicit=3)
    bad = make_config(sfa=True)
    bad["draftsmith"]["max_draft_len"] = 3
    with pytest.raises(UserError, match="max_draft_len 3 contradicts the derived 4"):
        write_package(FakeAdapter(bad), adapter_file(tmp_path), tmp_path / "out", TRTLLM)
    with pytest.raises(UserError, match="adapter spec max_draft_len = 5"):
        write_package(FakeAdapter(make_config()), adapter_file(tmp_path), tmp_path / "out", TRTLLM,
                      explicit_max_draft_len=5)
    assert not (tmp_path / "out").exists()



# ---- the emitted text -------------------------------------------------------------------------------


def test_emitted_text_compiles_names_no_path_and_carries_the_drafter(tmp_path):
    yaml = adapter_file(tmp_path)
    config = make_config()
    res = write_package(FakeAdapter(config), yaml, tmp_path / "out", TRTLLM)
    assert res.max_draft_len == BLOCK and res.architecture == ARCH
    for f in ("drafter.py", "__init__.py"):
        text = (res.package_dir / f).read_text()
        compile(text, f, "exec")
        assert str(tmp_path) not in text and "sha256" not in text, f  # portable (issue 17 point 10)
        assert all(len(line) <= 120 for line in text.splitlines()), f
        assert "\n\n\n\n" not in text and not re.search(r"[ \t]+$", text, re.M), f
    data = json.loads((res.package_dir / "resolved.json").read_text())
    assert R.model_validate(data["resolved"]) == R.from_config(config)
    assert PackagedDrafter.from_package(res.package_dir).architecture == ARCH
    init = (res.package_dir / "__init__.py").read_text()
    assert init.index("check_engine_version") < init.index("from .drafter")
    snippet = (res.package_dir / "speculative_config.yaml").read_text()
    r = R.from_config(config)
    for line in (f"decoding_type: {decoding_type(r)}", f"max_draft_len: {BLOCK}", f"block_size: {r.block_size}",
                 f"mask_token_id: {r.mask_token_id}", "attention_backend: VANILLA"):
        assert line in snippet, line
    assert res.speculative_config == snippet and snippet.rstrip() in res.summary()
    paste = (res.package_dir / "PASTE.md").read_text()
    assert f'"{ARCH}": "modeling_draftsmith_tiny_dspark",' in paste and f'"{ARCH}",' in paste


def test_decoding_type_and_base_follow_the_heads(tmp_path):
    """DFlash (no head, no shift) on DFlashForCausalLM with a DFLASH builder; DSpark otherwise."""
    for sfa, want, base, mode in ((False, "DFlash", "modeling_dflash import DFlashForCausalLM", "DFLASH"),
                                  (True, "DSpark", "modeling_dspark import GQADSparkForCausalLM", "DSPARK")):
        config = make_config(sfa=sfa)
        section = dict(config["draftsmith"], heads={"markov_rank": 0, "markov_head_type": "vanilla",
                                                    "confidence": False, "confidence_with_markov": False})
        config = dict(config, draftsmith=section)
        res = write_package(FakeAdapter(config), adapter_file(tmp_path), tmp_path / f"out{sfa}", TRTLLM)
        src = (res.package_dir / "drafter.py").read_text()
        assert res.decoding_type == want and base in src and f"SpeculativeDecodingMode.{mode})" in src
        assert f"decoding_type: {want}" in res.speculative_config


def test_unknown_device_class_is_left_to_trtllm_and_worker_mask_limits(tmp_path):
    """sm120 (no table in the spec) raises no draftsmith error; TensorRT-LLM's own forward runs."""
    from draftsmith.framework.emit.binding import BoundDrafter
    from draftsmith.framework.emit.render import worker_mask_problems

    r = R.from_config(make_config())
    bound = BoundDrafter(r.adapter, r)
    assert bound.lowerings("sm120") is None and bound.check_combination("TRTLLM", "sm120") is None
    assert bound.lowerings("cpu") == tuple(l.lowering["cpu"] for l in r.layers)
    causal = r.model_copy(update={"layers": tuple(l.model_copy(update={"mask": type(l.mask)(True, None)})
                                                  for l in r.layers)})
    assert worker_mask_problems(causal) and "causal full attention" in worker_mask_problems(causal)[0]


def test_engine_version_floor():
    assert version_key("1.4.0rc1") < version_key("1.4.0") < version_key("1.4.1rc1")
    assert version_key("1.3.0rc27") < version_key("1.4.0rc1") <= version_key("1.4.0rc1")
    check_engine_version("1.4.0rc4", "1.4.0rc1", "pkg")
    with pytest.raises(ImportError, match=r"^pkg needs TensorRT-LLM >= 1.4.0rc1 .* 1.3.0rc27$"):
        check_engine_version("1.3.0rc27", "1.4.0rc1", "pkg")


def test_emitted_module_uses_only_documented_trtllm_names(tmp_path):
    res = write_package(FakeAdapter(make_config()), adapter_file(tmp_path), tmp_path / "out", TRTLLM)
    allowed = doc_names()
    assert allowed, "docs/trtllm-interface.md lists no names"
    for f in ("drafter.py", "__init__.py"):
        used = engine_names_used((res.package_dir / f).read_text())
        if f == "drafter.py":
            assert "tensorrt_llm._torch.models.modeling_dspark.GQADSparkForCausalLM" in used
            assert "GQADSparkForCausalLM.dflash_forward" in used
        unknown = {n for n in used if n not in allowed and not any(a.startswith(n + ".") for a in allowed)}
        assert not unknown, f"{f} uses TensorRT-LLM names not in {DOC.name}: {sorted(unknown)}"


def test_re_emit_replaces_whole_and_a_failed_emit_leaves_the_old_package(tmp_path, monkeypatch):
    import draftsmith.framework.emit.render as emit_mod

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


# ---- the real adapters -------------------------------------------------------------------------------


def test_emit_minimax_dspark(tmp_path):
    from draftsmith.framework.emit.render import emit

    res = emit("minimax_dspark", target="trtllm", out=tmp_path / "out")
    assert res.max_draft_len == 7 and res.architecture == "DSparkMiniMaxDraftModel" and res.decoding_type == "DSpark"
    src = (res.package_dir / "drafter.py").read_text()
    assert "class DraftsmithBackbone(DecoderModelForCausalLM)" in src  # generated, not MiniMaxM3ForCausalLM
    allowed = doc_names()
    unknown = {n for n in engine_names_used(src) if n not in allowed
               and not any(a.startswith(n + ".") for a in allowed)}
    assert not unknown, sorted(unknown)
    with pytest.raises(UserError, match="unknown; known: trtllm"):
        emit("minimax_dspark", target="vllm", out=tmp_path / "x")


def test_cli_bakes_overrides_into_the_packaged_drafter(tmp_path, capsys):
    from draftsmith.framework.cli.main import main

    args = ["emit", "adapter=minimax_dspark", "target=trtllm", f"out={tmp_path}", "adapter.attention.window=2048",
            "adapter.attention.lowering.windowed.sm100=trtllm_gen"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "max_draft_len = 7" in printed and "decoding_type: DSpark" in printed
    pkg = tmp_path / "draftsmith_minimax_dspark"
    assert "non-causal, window 2048 -> sm100 trtllm_gen" in (pkg / "drafter.py").read_text()
    r = PackagedDrafter.from_package(pkg).resolved
    assert all(l.mask.window == 2048 and l.lowering["sm100"] == "trtllm_gen" for l in r.layers)
    assert main(["emit", "adapter=minimax_dspark", "target=vllm", f"out={tmp_path}"]) == 2
