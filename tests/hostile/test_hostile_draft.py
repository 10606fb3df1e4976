"""Hostile converted checkpoints for ``draftsmith draft``: NaN weights (drafter or target),
invalid config values, an index escaping the folder, truncated shards, FIFOs, huge contexts.
Each ends in one ``error:`` line and exit 2 (never exit 0 with garbage tokens, never a
traceback); ``format=json`` output is always valid JSON."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.execute import convert
from draftsmith.framework.convert.synth import synthesize
from support.reliability_log import record


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{adapter: (converted dir, target dir)} for a windowed and a full-attention drafter."""
    out = {}
    for name in ("minimax_dspark", "zlab_dflash"):
        root = tmp_path_factory.mktemp(name)
        a = load_adapter(name)
        synthesize(a, "tiny", root / "src", seed=4)
        convert(a, root / "src", root / "conv", progress=False)
        out[name] = (root / "conv", root / "src" / "target")
    return out


def clone(made, name, tmp_path) -> tuple[Path, Path]:
    conv, target = made[name]
    c, t = tmp_path / "conv", tmp_path / "target"
    shutil.copytree(conv, c)
    shutil.copytree(target, t)
    return c, t


def draft(ckpt: Path, target: Path, *extra: str) -> tuple[int, str, str]:
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(["draft", f"checkpoint={ckpt}", f"target={target}", "context=32", *extra])
    return rc, o.getvalue(), e.getvalue()


def refused(ckpt, target, *needles, extra=()) -> str:
    rc, out, err = draft(ckpt, target, *extra)
    assert rc == 2, (rc, out[-500:], err[-1500:])
    lines = err.strip().splitlines()
    assert lines and all(l.startswith("error: ") for l in lines) and "Traceback" not in err, err[-1500:]
    for n in needles:
        assert any(n in l for l in lines), (n, lines)
    return err


def _shards(d: Path) -> list[Path]:
    return sorted(d.glob("*.safetensors"))


def _poison(path: Path, name: str, value: float) -> None:
    t = load_file(str(path))
    w = t[name].clone()
    w.view(-1)[w.numel() // 2] = value
    t[name] = w
    save_file(t, str(path), metadata={"format": "pt"})


def test_json_output_is_valid(made):
    conv, target = made["minimax_dspark"]
    rc, out, err = draft(conv, target, "format=json")
    assert rc == 0, err
    rep = json.loads(out, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    assert len(rep["tokens"][0]) == rep["max_draft_len"]
    record("draft", "format=json on a healthy checkpoint", "valid JSON (no bare NaN)")


@pytest.mark.parametrize("adapter", ["minimax_dspark", "zlab_dflash"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_in_a_layer_weight(adapter, bad, made, tmp_path):
    conv, target = clone(made, adapter, tmp_path)
    layer = 1
    for f in _shards(conv):
        names = [n for n in load_file(str(f)) if f"layers.{layer}." in n and "o_proj.weight" in n]
        if names:
            _poison(f, names[0], bad)
            break
    else:
        pytest.fail("no o_proj weight found")
    err = refused(conv, target, "non-finite", f"layer {layer}", extra=("format=json",))
    record("draft", f"{bad} in a converted layer weight ({adapter})", "exit 2, names the first non-finite layer")


def test_nan_in_target_lm_head(made, tmp_path):
    conv, target = clone(made, "minimax_dspark", tmp_path)
    for f in _shards(target):
        if "lm_head.weight" in load_file(str(f)):
            _poison(f, "lm_head.weight", float("nan"))
    refused(conv, target, "non-finite", "lm_head")
    record("draft", "NaN in the target's lm_head", "exit 2, names lm_head")


CONFIG_TAMPER = [(("block_size",), "7"), (("block_size",), 0), (("block_size",), -5),
                 (("mask_token_id",), 10**6), (("target_layer_ids",), ["1", "2"]), (("dims", "heads"), "4"),
                 (("layers", 0, "mask", "window"), -4), (("layers", 0, "mask", "window"), "big")]


@pytest.mark.parametrize("path,value", CONFIG_TAMPER)
def test_invalid_converted_config(path, value, made, tmp_path):
    conv, target = clone(made, "minimax_dspark", tmp_path)
    cfg = json.loads((conv / "config.json").read_text())
    node = cfg["draftsmith"]
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    (conv / "config.json").write_text(json.dumps(cfg))
    refused(conv, target, "config.json: draftsmith.")
    record("draft", f"converted config: draftsmith.{'.'.join(map(str, path))} = {value!r}", "exit 2, names the key")


def test_index_escaping_the_folder(made, tmp_path):
    conv, target = clone(made, "minimax_dspark", tmp_path)
    shard = _shards(conv)[0]
    outside = tmp_path / "x.safetensors"
    shutil.move(shard, outside)
    names = list(load_file(str(outside)))
    (conv / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {n: "../x.safetensors" for n in names}}))
    refused(conv, target, "not a file name in this folder")
    record("draft", "converted index pointing at ../x.safetensors", "exit 2, nothing read outside")


def _converted_wm(conv: Path) -> dict[str, str]:
    return {n: f.name for f in _shards(conv) for n in load_file(str(f))}


#: the converted checkpoint's index as ``draft`` reads it (the source's: test_hostile_bounds.py)
CONVERTED_INDEX_ATTACKS = {
    "5000-digit integer": lambda wm: '{"metadata": {"total_size": ' + "9" * 5000 + '}, "weight_map": ' + json.dumps(wm) + "}",
    "deep nesting": lambda wm: '{"metadata": ' + "[" * 100000 + "]" * 100000 + ', "weight_map": ' + json.dumps(wm) + "}",
    "Infinity": lambda wm: '{"metadata": {"total_size": Infinity}, "weight_map": ' + json.dumps(wm) + "}",
    "string total_size": lambda wm: json.dumps({"metadata": {"total_size": "big"}, "weight_map": wm}),
    "weight_map a list": lambda wm: json.dumps({"weight_map": list(wm)}),
    "weight_map empty": lambda wm: json.dumps({"weight_map": {}}),
    "shard name an integer": lambda wm: json.dumps({"weight_map": {**wm, next(iter(wm)): 7}}),
    "a tensor not listed": lambda wm: json.dumps({"weight_map": dict(list(wm.items())[1:])}),
    "a listed tensor no shard holds": lambda wm: json.dumps({"weight_map": {**wm, "layers.0.ghost.weight": next(iter(wm.values()))}}),
}


@pytest.mark.parametrize("attack", sorted(CONVERTED_INDEX_ATTACKS))
def test_converted_index_attacks(attack, made, tmp_path):
    conv, target = clone(made, "minimax_dspark", tmp_path)
    idx = conv / "model.safetensors.index.json"
    idx.write_text(CONVERTED_INDEX_ATTACKS[attack](_converted_wm(conv)))
    err = refused(conv, target, str(idx))
    assert len(err.strip().splitlines()) == 1, err
    record("draft", f"converted index: {attack}", "exit 2, one line naming the index")


@pytest.mark.parametrize("key,value", [("heads", 0), ("kv_heads", 0), ("heads", "4"), ("kv_heads", 3), ("heads", 2**30),
                                       ("heads", 10**40)])
def test_converted_head_counts(key, value, made, tmp_path):
    """Zero, string, non-dividing or absurd head counts in the converted config: one line."""
    conv, target = clone(made, "minimax_dspark", tmp_path)
    cfg = json.loads((conv / "config.json").read_text())
    cfg["draftsmith"]["dims"][key] = value
    (conv / "config.json").write_text(json.dumps(cfg))
    err = refused(conv, target, "config.json")
    assert len(err.strip().splitlines()) == 1, err
    record("draft", f"converted config: draftsmith.dims.{key} = {value!r}", "exit 2, one line")


def test_converted_config_5000_digit_integer(made, tmp_path):
    conv, target = clone(made, "minimax_dspark", tmp_path)
    text = (conv / "config.json").read_text().rstrip()
    (conv / "config.json").write_text(text[:-1] + ', "zz": ' + "7" * 5000 + "}")
    err = refused(conv, target, "config.json", "not valid JSON")
    assert len(err.strip().splitlines()) == 1, err
    record("draft", "converted config.json: a 5000-digit integer", "exit 2, one line")


def test_truncated_converted_shard(made, tmp_path):
    conv, target = clone(made, "minimax_dspark", tmp_path)
    f = _shards(conv)[0]
    data = f.read_bytes()
    f.write_bytes(data[: len(data) * 2 // 3])
    refused(conv, target, str(f))
    record("draft", "truncated converted shard", "exit 2, names the file")


def test_fifo_shard(made, tmp_path):
    conv, target = clone(made, "minimax_dspark", tmp_path)
    f = _shards(conv)[0]
    f.unlink()
    os.mkfifo(f)
    refused(conv, target, "FIFO")
    record("draft", "FIFO in place of a converted shard", "exit 2 at once (never opened)")


@pytest.mark.parametrize("context", [10**9, 10**12])
def test_huge_context_full_attention(context, made):
    conv, target = made["zlab_dflash"]
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(["draft", f"checkpoint={conv}", f"target={target}", f"context={context}"])
    # past 2^31-1 the key itself is refused (naming it); below, the memory estimate refuses
    want = "needs about" if context < 2**31 else f"context={context}: expected an integer <= {2**31 - 1}"
    assert rc == 2 and want in e.getvalue() and "Traceback" not in e.getvalue(), (rc, e.getvalue()[-800:])
    assert len(e.getvalue().strip().splitlines()) == 1
    record("draft", f"context={context} with a full-attention layer", "exit 2 before allocating")
