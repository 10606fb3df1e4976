"""Hostile input, round four (issue 46, point 3): every size that reaches an allocation is checked
first, against a stated bound and, for memory, against the machine's available memory.

- DFlash 2's candidate selector (``selector_top_k``, ``selector_rank``) is in the draft step's
  memory estimate: a drafter whose selector needs terabytes is refused in one line naming it;
- ``eval``: the longest sequence's KV caches and prefill logits within the device's free memory
  (``max_new_tokens`` named), before any decoding;
- ``convert``: the largest group (one tensor and its output, plus the queued writes) within
  ``MemAvailable`` and the output within the destination's free disk, before any tensor is read;
- a safetensors index lists at most ``MAX_INDEX_SHARDS`` shard files.

Each bound is tried just under (accepted) and just over (refused); the expected sizes are counted
here from the shapes, not taken from the estimate under test.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors import safe_open

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.resolved import ResolvedDrafter
from draftsmith.framework.convert import checkpoint as ck
from draftsmith.framework.convert.synth import synthesize
from draftsmith.framework.errors import UserError
from draftsmith.framework.io import host_memory
from support.helpers import one_error
from support.reliability_log import record

AREA = "round4"
PAIR = Path(__file__).parents[1] / "fixtures" / "tiny_pair"


def refused_line(capsys) -> str:
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err + cap.out, cap.err[-2000:]
    lines = [l for l in cap.err.strip().splitlines() if "Loading weights" not in l]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


# ---- DFlash 2's selector in the draft estimate -------------------------------------------------------------------

@pytest.fixture(scope="module")
def dflash2(tmp_path_factory):
    d = tmp_path_factory.mktemp("sel")
    synthesize(load_adapter("zlab_dflash2"), "tiny", d / "S", seed=2)
    assert main(["convert", "adapter=zlab_dflash2", f"source={d / 'S'}", f"out={d / 'T'}", "progress=false"]) == 0
    return d


def test_selector_asking_for_terabytes_refused_before_allocating(tmp_path, capsys):
    """``selector_top_k`` = vocab = 151 936: the pairwise scores alone need ``7 * k * k * 4`` bytes
    (about 600 GiB); the checkpoint itself is 10 MB."""
    a = load_adapter("zlab_dflash2", ["synth.tiny.vocab_size=151936", "synth.tiny.dflash_config.selector_top_k=151936"])
    synthesize(a, "tiny", tmp_path / "S", seed=1)
    assert main(["convert", "adapter=zlab_dflash2", f"source={tmp_path / 'S'}", f"out={tmp_path / 'T'}",
                 "progress=false"]) == 0
    capsys.readouterr()
    rc = main(["draft", f"checkpoint={tmp_path / 'T'}", f"target={tmp_path / 'S' / 'target'}", "device=cpu"])
    assert rc == 2
    line = refused_line(capsys)
    assert "candidate selector" in line and "selector_top_k 151936" in line, line
    record(AREA, "DFlash 2 selector_top_k = vocab = 151936 (draft)", "exit 2 before allocating, names selector_top_k")


def _selector_oracle(r: ResolvedDrafter, batch: int) -> int:
    """The selector's tensors per step, counted from their shapes (runtime/dflash2.py): the stable sort
    of ``[B, K, V]`` float32 logits (values float32 + ids int64), the path logits ``[B, K, V]`` float32,
    four ``[B, K, k, r]`` float32 codebook gathers and products, two ``[B, K, k, k]`` float32 scores."""
    K, V = r.max_draft_len, r.dims.vocab
    k, rank = r.dflash2.selector.top_k, r.dflash2.selector.rank
    sort = batch * K * V * (4 + 8)
    path = batch * K * V * 4
    gathers = 4 * batch * K * k * rank * 4
    pairs = 2 * batch * K * k * k * 4
    return sort + path + gathers + pairs


def test_selector_bound_just_under_and_just_over(dflash2, monkeypatch):
    from draftsmith.framework.runtime import memory

    T = dflash2 / "T"
    r = ResolvedDrafter.from_config(json.loads((T / "config.json").read_text()))
    parts = memory.estimate_bytes(r, (T / "model.safetensors").stat().st_size, 64, 2)
    assert parts["selector"] == _selector_oracle(r, 2)
    total = sum(parts.values())
    monkeypatch.setattr(host_memory, "available_bytes", lambda: total)
    assert memory.check_draft_memory(T, "cpu", context=64, batch=2) == total
    monkeypatch.setattr(host_memory, "available_bytes", lambda: total - 1)
    with pytest.raises(UserError, match=r"candidate selector .*selector_top_k 4, selector_rank 16"):
        memory.check_draft_memory(T, "cpu", context=64, batch=2)
    # without its selector the same drafter needs exactly the selector's bytes less
    bare = r.model_copy(update={"dflash2": None})
    assert sum(memory.estimate_bytes(bare, (T / "model.safetensors").stat().st_size, 64, 2).values()) == \
        total - _selector_oracle(r, 2)
    record(AREA, "draft memory: selector in the estimate, free = estimate / estimate - 1", "accepted / exit 2")


def test_draft_steps_own_check_counts_the_selector(dflash2, monkeypatch, capsys):
    """``run_draft``'s check (the paged cache's real page counts) counts the selector too: with just
    the selector's bytes missing the run is refused; with them present it drafts."""
    from draftsmith.framework.runtime import draft as draft_mod

    T = dflash2 / "T"
    r = ResolvedDrafter.from_config(json.loads((T / "config.json").read_text()))
    import torch

    need = draft_mod.estimate_bytes(r, 64, 1, 16, torch.bfloat16)
    bare = draft_mod.estimate_bytes(r.model_copy(update={"dflash2": None}), 64, 1, 16, torch.bfloat16)
    assert need - bare == _selector_oracle(r, 1)
    monkeypatch.setattr(draft_mod, "available_bytes", lambda device: need - 1)
    with pytest.raises(UserError, match="needs about"):
        draft_mod.run_draft(T, dflash2 / "S" / "target", context=64, batch=1, repeats=1)
    monkeypatch.setattr(draft_mod, "available_bytes", lambda device: need)
    assert draft_mod.run_draft(T, dflash2 / "S" / "target", context=64, batch=1, repeats=1).tokens.shape == (1, 7)


# ---- eval: context and KV ----------------------------------------------------------------------------------------

@pytest.fixture()
def eval_pair(tmp_path):
    """The tiny pair with one full-attention drafter layer (its KV cache holds the whole context) and a
    target that claims 2^40 positions (no position bound short of memory)."""
    drafter, target = tmp_path / "dflash2", tmp_path / "target"
    shutil.copytree(PAIR / "dflash2", drafter)
    shutil.copytree(PAIR / "target", target)
    raw = json.loads((drafter / "config.json").read_text())
    raw["layer_types"][-1] = "full_attention"
    (drafter / "config.json").write_text(json.dumps(raw))
    cfg = json.loads((target / "config.json").read_text())
    cfg["max_position_embeddings"] = 1 << 40
    (target / "config.json").write_text(json.dumps(cfg))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "def add(a, b):"}) + "\n")
    return drafter, target, prompts


def test_eval_context_asking_for_terabytes_refused(eval_pair, capsys):
    drafter, target, prompts = eval_pair
    rc = main(["eval", f"checkpoint={drafter}", f"target={target}", f"prompts={prompts}", "threads=1",
               "max_new_tokens=2000000000"])
    assert rc == 2
    line = refused_line(capsys)
    assert line.startswith("error: max_new_tokens=2000000000: ") and "drafter KV" in line, line
    record(AREA, "eval max_new_tokens=2e9 on a target claiming 2^40 positions", "exit 2 before decoding, names max_new_tokens")


def test_eval_memory_bound_just_under_and_just_over(eval_pair, monkeypatch):
    from draftsmith.framework.eval import loop

    drafter, target, prompts = eval_pair
    seen, free = {}, {"bytes": 1 << 60}
    real, real_available = loop.check_eval_memory, host_memory.available_bytes

    def spy(r, drafter_el, device, context, prompt_tokens, kv_token, vocab, el, max_new):
        """The eval check alone sees ``free`` (the drafter's weight check before it sees the machine)."""
        seen.update(r=r, drafter_el=drafter_el, context=context, prompt=prompt_tokens, kv_token=kv_token,
                    vocab=vocab, el=el)
        host_memory.available_bytes = lambda: free["bytes"]
        try:
            return real(r, drafter_el, device, context, prompt_tokens, kv_token, vocab, el, max_new)
        finally:
            host_memory.available_bytes = real_available

    monkeypatch.setattr(loop, "check_eval_memory", spy)
    loop.run_eval(target, _converted(drafter), prompts, max_new_tokens=4, dtype="float32")
    # expected bytes from the shapes: the drafter's full layer holds every position, each window W-1
    # of them (at most); the target's six layers 2 * 2 kv heads * 32 dims per position; prefill logits
    r, ctx = seen["r"], seen["context"]
    assert ctx == seen["prompt"] + 4 + r.max_draft_len + 1
    assert seen["kv_token"] == 6 * 2 * 2 * 32 * 4 and seen["vocab"] == 256
    assert seen["el"] == seen["drafter_el"] == 4  # dtype=float32 for both
    per = 2 * r.dims.kv_heads * r.dims.head_dim * 4
    drafter_kv = sum(ctx if l.mask.window is None else min(ctx, l.mask.window) for l in r.layers) * per
    need = drafter_kv + ctx * seen["kv_token"] + seen["prompt"] * 256 * (4 + 4)
    for have, ok in ((need, True), (need - 1, False)):
        free["bytes"] = have
        if ok:
            loop.run_eval(target, _converted(drafter), prompts, max_new_tokens=4, dtype="float32")
        else:
            with pytest.raises(UserError, match="^max_new_tokens=4: "):
                loop.run_eval(target, _converted(drafter), prompts, max_new_tokens=4, dtype="float32")
    record(AREA, "eval memory: free = estimate / estimate - 1", "accepted / exit 2")


_CONVERTED: dict[Path, Path] = {}


def _converted(drafter: Path) -> Path:
    if drafter not in _CONVERTED:
        out = drafter.parent / "converted"
        assert main(["convert", "adapter=zlab_dflash2", f"source={drafter}", f"out={out}", "progress=false"]) == 0
        _CONVERTED[drafter] = out
    return _CONVERTED[drafter]


# ---- convert: a tensor larger than memory, output larger than the disk --------------------------------------------

@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """A z-lab DFlash drafter: renames only, so each group is one tensor copied to one output."""
    d = tmp_path_factory.mktemp("plain")
    synthesize(load_adapter("zlab_dflash"), "tiny", d / "S", seed=3)
    with safe_open(str(d / "S" / "model.safetensors"), "pt") as f:
        sizes = {n: f.get_slice(n).get_shape() for n in f.keys()}
        dtypes = {n: f.get_slice(n).get_dtype() for n in f.keys()}
    width = {"BF16": 2, "F16": 2, "F32": 4}
    nbytes = {n: width[dtypes[n]] * _prod(s) for n, s in sizes.items()}
    return d, nbytes


def _prod(shape) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def test_tensor_past_available_memory_refused_before_reading(plain, tmp_path, monkeypatch, capsys):
    """Peak = the largest group's source and output (one tensor each here) plus two queued output
    groups: ``4 * largest``. At that much memory the conversion runs; one byte less and it is refused
    naming the tensor, before any tensor is read and with nothing at out=."""
    d, nbytes = plain
    largest = max(nbytes, key=nbytes.get)
    need = 4 * nbytes[largest]
    monkeypatch.setattr(host_memory, "available_bytes", lambda: need - 1)
    reads = []
    monkeypatch.setattr(ck.TensorReader, "read", lambda self, st: reads.append(st.name))
    assert main(["convert", "adapter=zlab_dflash", f"source={d / 'S'}", f"out={tmp_path / 'T'}", "progress=false"]) == 2
    line = one_error(capsys)
    assert f"tensor {largest} " in line and "MemAvailable" in line, line
    assert not reads and not (tmp_path / "T").exists()
    monkeypatch.undo()
    monkeypatch.setattr(host_memory, "available_bytes", lambda: need)
    assert main(["convert", "adapter=zlab_dflash", f"source={d / 'S'}", f"out={tmp_path / 'T'}", "progress=false"]) == 0
    record(AREA, "convert: largest tensor past MemAvailable (free = peak - 1 / peak)", "exit 2 before reading / converted")


def test_output_past_the_free_disk_refused_before_writing(plain, tmp_path, monkeypatch, capsys):
    from draftsmith.framework.convert import execute as ex

    d, nbytes = plain
    total = sum(nbytes.values())  # every tensor is an output (renames only)
    real = shutil.disk_usage

    for free, ok in ((total - 1, False), (total, True)):
        monkeypatch.setattr(ex.shutil, "disk_usage", lambda p, free=free: real(p)._replace(free=free))
        out = tmp_path / f"T{free}"
        rc = main(["convert", "adapter=zlab_dflash", f"source={d / 'S'}", f"out={out}", "progress=false"])
        if ok:
            assert rc == 0
            capsys.readouterr()
        else:
            assert rc == 2
            line = one_error(capsys)
            assert line.startswith(f"error: out={out}: the converted shards hold") and "free" in line, line
            assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    record(AREA, "convert: output past the destination's free disk (free = total - 1 / total)", "exit 2 before writing / converted")


# ---- index: shards listed -------------------------------------------------------------------------------------------

def test_index_shard_count_just_under_and_just_over(tmp_path, capsys):
    n = ck.MAX_INDEX_SHARDS
    assert n == 1 << 16
    for count, needle in ((n + 1, f"lists {n + 1} shard files, more than {n}"), (n, "which does not exist")):
        src = tmp_path / f"S{count}"
        src.mkdir()
        (src / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"]}))
        weight_map = {f"t{i}": f"s{i:06d}.safetensors" for i in range(count)}
        (src / ck.INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        with pytest.raises(UserError, match=needle):
            ck.shard_files(src)
    record(AREA, "index listing 65537 / 65536 shard files", "refused before opening / passes the bound")
