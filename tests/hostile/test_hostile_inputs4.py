"""Hostile input, round four (issue 46, point 4): one line for each bad input, and valid input accepted.

- a DFlash 2 ``conv_kernel_size`` larger than the block: drafted (a tap reaching before slot 0
  adds nothing, as TensorRT-LLM, z-lab and llama.cpp compute it), the same tokens and logits as
  the drafter with its taps cut to the block; ``convert to=speculators`` refuses it in one line;
- an eval prompt whose tokenizer gives an id past the vocabulary: one line naming the prompt;
- a shard that is a symbolic link to a file outside the checkpoint: refused by name, none of the
  target's bytes in the message;
- a JSON Lines prompt file whose strings hold U+2028 (and U+0085, U+2029): accepted;
- ``emit`` refuses a ``resolved.json`` larger than the emitted package's import reads;
- a FIFO anywhere in a cached Hugging Face revision (also one a writer holds open): refused before
  anything in the revision is opened, within seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.synth import synthesize
from draftsmith.framework.eval.prompts import read_prompts
from support.helpers import one_error
from support.reliability_log import record

AREA = "round4"
PAIR = Path(__file__).parents[1] / "fixtures" / "tiny_pair"


# ---- DFlash 2: conv_kernel_size past the block ---------------------------------------------------------------

@pytest.fixture(scope="module")
def wide_taps(tmp_path_factory):
    """A z-lab DFlash 2 drafter (block 8) with 10 convolution taps, converted; and the same drafter
    with its taps cut to the block (base kernel ``[:, :8]``, projection rows of taps 0..7)."""
    d = tmp_path_factory.mktemp("taps")
    a = load_adapter("zlab_dflash2", ["+synth.tiny[dflash_config.conv_kernel_size]=10"])
    synthesize(a, "tiny", d / "S", seed=3)
    assert json.loads((d / "S" / "config.json").read_text())["dflash_config"]["block_size"] == 8
    cut = d / "cut"
    shutil.copytree(d / "S", cut)
    raw = json.loads((cut / "config.json").read_text())
    raw["dflash_config"]["conv_kernel_size"] = 8
    (cut / "config.json").write_text(json.dumps(raw))
    w = load_file(cut / "model.safetensors")
    groups = raw["hidden_size"] // raw["dflash_config"]["conv_group_size"]
    for name in list(w):
        if name.endswith(".base_kernel"):
            w[name] = w[name][:, :8].contiguous()
        elif name.endswith(".kernel_projection.weight"):  # feature side*T*G + tap*G + group
            w[name] = w[name].view(2, 10, groups, -1)[:, :8].reshape(2 * 8 * groups, -1).contiguous()
    save_file(w, str(cut / "model.safetensors"))
    for src, out in ((d / "S", d / "wide"), (cut, d / "narrow")):
        assert main(["convert", "adapter=zlab_dflash2", f"source={src}", f"out={out}", "progress=false"]) == 0
    return d


def test_conv_kernel_past_the_block_drafts_as_the_cut_drafter(wide_taps, capsys):
    """Taps 8 and 9 never reach a slot of an 8-slot block: the draft equals the drafter cut to 8 taps."""
    capsys.readouterr()
    outs = {}
    for name in ("wide", "narrow"):
        dump = wide_taps / f"{name}.safetensors"
        rc = main(["draft", f"checkpoint={wide_taps / name}", f"target={wide_taps / 'S' / 'target'}", "device=cpu",
                   "context=16", "dtype=float32", f"dump={dump}", "format=json"])
        err = capsys.readouterr().err
        assert rc == 0 and "Traceback" not in err, err[-2000:]
        outs[name] = load_file(dump)
    assert torch.equal(outs["wide"]["outputs.tokens"], outs["narrow"]["outputs.tokens"])
    torch.testing.assert_close(outs["wide"]["outputs.logits"], outs["narrow"]["outputs.logits"], rtol=0, atol=1e-5)
    record(AREA, "DFlash 2 conv_kernel_size 10 > block 8 (draft)", "drafted; equal to the drafter cut to 8 taps")


def test_speculators_export_refuses_kernel_past_the_block(tmp_path, capsys, monkeypatch):
    """speculators' own classes refuse ``kernel_size > block_size``; ``convert to=speculators`` says so
    in one line and writes nothing; at ``kernel_size == block_size`` the export loads in speculators."""
    pytest.importorskip("speculators", reason="the crosscheck extra (speculators==0.9.0) is not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from speculators.models.dflash2 import DFlash2DraftModel
    from speculators.models.dflash2.model_definitions import GroupedDynamicCausalConv

    with pytest.raises(ValueError, match=r"kernel_size \(9\) cannot exceed block_size \(8\)"):
        GroupedDynamicCausalConv(32, block_size=8, kernel_size=9, group_size=16)  # their loader's own refusal
    for taps, ok in ((9, False), (8, True)):
        src = tmp_path / f"S{taps}"
        synthesize(load_adapter("speculators_dflash2", [f"+synth.tiny[conv_kernel_size]={taps}"]), "tiny", src, seed=2)
        assert json.loads((src / "config.json").read_text())["block_size"] == 8
        out = tmp_path / f"x{taps}"
        rc = main(["convert", f"source={src}", f"out={out}", "to=speculators", f"verifier={src / 'target'}",
                   "progress=false"])
        if ok:
            assert rc == 0, capsys.readouterr().err[-2000:]
            capsys.readouterr()
            m = DFlash2DraftModel.from_pretrained(str(out), torch_dtype=torch.bfloat16)
            assert m.config.conv_kernel_size == 8
        else:
            assert rc == 2
            line = one_error(capsys)
            assert "conv_kernel_size 9 larger than block_size 8" in line and "to=speculators_dflash2" in line, line
            assert not out.exists()
    record(AREA, "convert to=speculators of a DFlash 2 kernel 9 > block 8", "exit 2, one line; kernel 8 loads in speculators")


# ---- eval: a token past the vocabulary ------------------------------------------------------------------------

def test_eval_prompt_token_past_the_vocabulary(tmp_path, capsys):
    """A tokenizer whose added token has an id past the target's embedding (256 rows)."""
    target = tmp_path / "target"
    shutil.copytree(PAIR / "target", target)
    tok = json.loads((target / "tokenizer.json").read_text())
    tok["added_tokens"].append({"id": 300, "content": "<past>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
    (target / "tokenizer.json").write_text(json.dumps(tok))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "def f(x): <past>"}) + "\n")
    rc = main(["eval", f"checkpoint={PAIR / 'dspark'}", f"target={target}", f"prompts={prompts}", "threads=1",
               "max_new_tokens=4"])
    cap = capsys.readouterr()
    assert rc == 2 and "Traceback" not in cap.err, cap.err[-2000:]
    lines = [l for l in cap.err.strip().splitlines() if "Loading weights" not in l]
    assert len(lines) == 1 and lines[0].startswith(f"error: prompts={prompts}: prompt 1: token "), lines
    assert "outside the vocabulary (0..255" in lines[0], lines
    record(AREA, "eval prompt token id past the vocabulary", "exit 2, one line naming the prompt")


# ---- a symlinked shard -----------------------------------------------------------------------------------------

def test_symlinked_shard_refused_by_name_without_its_targets_bytes(tmp_path, capsys):
    src = tmp_path / "S"
    synthesize(load_adapter("zlab_dflash"), "tiny", src, seed=1)
    secret = tmp_path / "elsewhere" / "notes.txt"
    secret.parent.mkdir()
    secret.write_bytes(b"hunter2!private text")
    (src / "model.safetensors").unlink()
    (src / "model.safetensors").symlink_to(secret)
    leaks = [b"hunter2!", str(int.from_bytes(b"hunter2!", "little")).encode(), str(secret).encode()]
    for cmd in (["inspect", "adapter=zlab_dflash", f"source={src}"],
                ["convert", "adapter=zlab_dflash", f"source={src}", f"out={tmp_path / 'T'}"]):
        assert main(cmd) == 2
        line = one_error(capsys)
        assert line.startswith(f"error: {src / 'model.safetensors'}: a symbolic link leading out of"), line
        assert not any(x.decode() in line for x in leaks), line
    assert not (tmp_path / "T").exists()
    record(AREA, "shard symlinked to a file outside the checkpoint", "exit 2, named, none of the target's bytes shown")


def test_shard_linked_inside_its_folder_still_reads(tmp_path, capsys):
    src = tmp_path / "S"
    synthesize(load_adapter("zlab_dflash"), "tiny", src, seed=1)
    (src / "model.safetensors").rename(src / "real.bin")
    (src / "model.safetensors").symlink_to("real.bin")
    assert main(["inspect", "adapter=zlab_dflash", f"source={src}"]) == 0, capsys.readouterr().err[-2000:]


# ---- JSON Lines with U+2028 -------------------------------------------------------------------------------------

def test_json_lines_with_unicode_line_separators_accepted(tmp_path):
    texts = ["a\u2028b", "c\u2029d", "e\x85f", "g\x0bh\x0ci\x1cj"]
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps({"prompt": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    assert read_prompts(p) == texts
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(b"".join(json.dumps({"prompt": t}, ensure_ascii=False).encode() + b"\r\n" for t in texts))
    assert read_prompts(crlf) == texts
    plain = tmp_path / "p.txt"
    plain.write_text("one\u2028line\nsecond\r\n", encoding="utf-8")
    assert read_prompts(plain) == ["one\u2028line", "second"]
    record(AREA, "JSON Lines prompts holding U+2028 / U+2029 / U+0085", "accepted, each line one prompt")


# ---- emit: resolved.json within what the import reads ----------------------------------------------------------

def test_emit_refuses_package_data_past_the_import_limit(tmp_path, monkeypatch):
    """One limit for both sides (``names.MAX_PACKAGE_DATA_BYTES``): at exactly the written size emit
    writes and the import reads; one byte less and emit refuses, writing nothing."""
    from draftsmith.framework.emit import binding, names
    from draftsmith.framework.emit.binding import PackagedDrafter
    from draftsmith.framework.emit.render import emit
    from draftsmith.framework.errors import UserError

    res = emit("zlab_dflash2", target="trtllm", out=tmp_path / "first")
    size = (res.package_dir / "resolved.json").stat().st_size
    for limit, ok in ((size, True), (size - 1, False)):
        monkeypatch.setattr(names, "MAX_PACKAGE_DATA_BYTES", limit)
        monkeypatch.setattr(binding, "MAX_PACKAGE_DATA_BYTES", limit)
        out = tmp_path / f"at{limit}"
        if ok:
            r = emit("zlab_dflash2", target="trtllm", out=out)
            assert PackagedDrafter.from_package(r.package_dir).adapter == "zlab_dflash2"
        else:
            with pytest.raises(UserError, match=rf"resolved\.json would hold {size} bytes, more than the {limit}"):
                emit("zlab_dflash2", target="trtllm", out=out)
            assert not out.exists() or not any(out.iterdir())
            with pytest.raises(ValueError, match="larger than"):  # what the import would have said
                PackagedDrafter.from_package(res.package_dir)
    record(AREA, "emit: resolved.json one byte past the import's limit", "exit 2 at emit; at the limit written and read")


# ---- a FIFO in a cached revision --------------------------------------------------------------------------------

def _cache_with(tmp_path: Path, drafter: Path, plant) -> Path:
    repo = tmp_path / "hub" / "models--org--drafter"
    rev = "c" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)
    snap = repo / "snapshots" / rev
    shutil.copytree(drafter, snap)
    plant(repo, snap)
    return snap


@pytest.mark.parametrize("where", ["config.json", "README.md", "sub/deeper/notes", "linked blob"])
def test_fifo_anywhere_in_a_cached_revision_refused(where, tmp_path, capsys, monkeypatch):
    src = tmp_path / "S"
    synthesize(load_adapter("zlab_dflash"), "tiny", src, seed=1)
    shutil.rmtree(src / "target")

    def plant(repo, snap):
        if where == "linked blob":
            (repo / "blobs").mkdir()
            os.mkfifo(repo / "blobs" / "abc")
            (snap / "tokenizer.json").symlink_to("../../blobs/abc")
        else:
            (snap / where).parent.mkdir(parents=True, exist_ok=True)
            if (snap / where).exists():
                (snap / where).unlink()
            os.mkfifo(snap / where)

    _cache_with(tmp_path, src, plant)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    t = time.perf_counter()
    assert main(["inspect", "adapter=zlab_dflash", "source=org/drafter"]) == 2
    line = one_error(capsys)
    assert "is a FIFO in the cached revision" in line and "source=org/drafter" in line, line
    assert time.perf_counter() - t < 30
    record(AREA, f"FIFO in a cached revision ({where})", "exit 2 before anything is opened")


def test_held_fifo_in_a_cached_revision_never_blocks_inspect(tmp_path, capsys, monkeypatch):
    """A writer holds the FIFO open (a reader's open would succeed and its read would block)."""
    src = tmp_path / "S"
    synthesize(load_adapter("zlab_dflash"), "tiny", src, seed=1)
    shutil.rmtree(src / "target")
    snap = _cache_with(tmp_path, src, lambda repo, snap: os.mkfifo(snap / "generation_config.json"))
    fifo = snap / "generation_config.json"
    held = {}

    def writer():  # blocks until a reader opens it (never, if draftsmith keeps off it)
        try:
            held["fd"] = os.open(fifo, os.O_WRONLY)
        except OSError:
            pass

    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer's open complete: the FIFO is held
    th = threading.Thread(target=writer, daemon=True)
    th.start()
    th.join(5)
    try:
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        t = time.perf_counter()
        assert main(["inspect", "adapter=zlab_dflash", "source=org/drafter"]) == 2
        assert "is a FIFO in the cached revision" in one_error(capsys)
        assert time.perf_counter() - t < 30
    finally:
        if "fd" in held:
            os.close(held["fd"])
        os.close(rfd)
    record(AREA, "FIFO held open by a writer in a cached revision", "exit 2 at once, never blocks")
