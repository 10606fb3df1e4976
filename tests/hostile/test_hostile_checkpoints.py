"""Hostile checkpoints: a fresh synthetic tiny MiniMax DSpark checkpoint, corrupted at
random (truncated files, lying headers, duplicate or misplaced tensors across shards,
missing shards, wrong weight/scale dtypes, scale byte 255, mis-shaped scales, NaN/Inf).

Every case runs ``draftsmith convert`` in-process and must exit 2 with one-line errors
naming the tensor and the file, leave nothing at the destination and no temp dir beside
it, and never raise a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.synth import synthesize
from support.reliability_log import record

CASES = settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
SEED = int.from_bytes(os.urandom(4), "little")  # fresh inputs each run; printed on failure
ST = "model.safetensors"
DTYPE_ST = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.uint8: "U8",
            torch.float8_e4m3fn: "F8_E4M3", torch.int32: "I32", torch.int8: "I8"}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("pristine") / "ckpt"
    synthesize(load_adapter("minimax_dspark"), "tiny", d, seed=SEED)
    shutil.rmtree(d / "target")
    return d


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("work")


def clone(base: Path, work: Path) -> Path:
    d = Path(tempfile.mkdtemp(dir=work)) / "src"
    shutil.copytree(base, d)
    return d


def tensors(d: Path) -> dict[str, torch.Tensor]:
    return load_file(str(d / ST))


def save(d: Path, t: dict, name: str = ST) -> None:
    save_file(t, str(d / name), metadata={"format": "pt"})


def header(path: Path) -> tuple[dict, bytes]:
    b = path.read_bytes()
    n = int.from_bytes(b[:8], "little")
    return json.loads(b[8:8 + n]), b[8 + n:]


def write_header(path: Path, h: dict, data: bytes) -> None:
    raw = json.dumps(h).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


def convert_refused(src: Path, *needles: str) -> str:
    """Exit 2; every line ``error: ...``; each needle in some line; nothing at or beside out."""
    out = src.parent / "out"
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(["convert", "adapter=minimax_dspark", f"source={src}", f"out={out}"])
    err = e.getvalue()
    assert rc == 2, f"seed {SEED}: exit {rc}: {err}"
    lines = err.strip().splitlines()
    assert lines and all(l.startswith("error: ") for l in lines), err
    for n in needles:
        assert any(n in l for l in lines), f"seed {SEED}: {n!r} not in {lines}"
    assert not out.exists(), "a failed conversion left output"
    assert not [p.name for p in src.parent.iterdir() if p.name.startswith(".out.")], "stray temp dir"
    return err


def scale_names(t: dict) -> list[str]:
    return sorted(k for k in t if k.endswith("_scale_inv"))


# ------------------------------------------------------------------------ file-level corruption
@CASES
@given(frac=st.floats(0.0, 0.999), shard=st.sampled_from(["model", "index"]))
def test_truncated_file(frac, shard, base, work):
    src = clone(base, work)
    f = src / ST
    b = f.read_bytes()
    cut = int(len(b) * frac)
    f.write_bytes(b[:cut])
    hlen = int.from_bytes(b[:8], "little")
    err = convert_refused(src, str(f))
    if cut >= 8 + hlen:  # the header survived: the first tensor past the cut is named
        assert "tensor language_model.model.dspark." in err and "truncated" in err, err
    record("checkpoints", "truncated safetensors file (random cut)", "exit 2, file (and tensor if past the header)")


@CASES
@given(data=st.data())
def test_header_disagrees_with_data(data, base, work):
    src = clone(base, work)
    f = src / ST
    h, payload = header(f)
    name = data.draw(st.sampled_from(sorted(k for k in h if k != "__metadata__")))
    info = dict(h[name])
    how = data.draw(st.sampled_from(["shape", "dtype", "offsets"]))
    size = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1, "I32": 4, "I8": 1, "F64": 8}
    if how == "shape":
        info["shape"] = data.draw(st.lists(st.integers(1, 300), min_size=1, max_size=3))
    elif how == "dtype":
        info["dtype"] = data.draw(st.sampled_from(sorted(size)))
    else:
        s, e = info["data_offsets"]
        delta = data.draw(st.integers(-64, 64).filter(bool))
        info["data_offsets"] = [s, e + delta] if data.draw(st.booleans()) else [max(0, s + delta), e]
    numel = 1
    for x in info["shape"]:
        numel *= x
    assume(numel * size[info["dtype"]] != info["data_offsets"][1] - info["data_offsets"][0] or how == "offsets")
    assume(info != h[name])
    h[name] = info
    write_header(f, h, payload)
    convert_refused(src, str(f), name)
    record("checkpoints", f"header {how} disagrees with the data length", "exit 2, tensor and file")


@CASES
@given(data=st.data())
def test_header_garbage(data, base, work):
    src = clone(base, work)
    f = src / ST
    h, payload = header(f)
    kind = data.draw(st.sampled_from(["random bytes", "json list", "bad json", "bad dtype", "overlap", "trailing"]))
    if kind == "random bytes":
        f.write_bytes(data.draw(st.binary(min_size=0, max_size=4096)))
        needle = str(f)
    elif kind == "json list":
        write_header(f, [1, 2], b"")
        needle = str(f)
    elif kind == "bad json":
        raw = b"{" + data.draw(st.binary(min_size=1, max_size=40))
        f.write_bytes(len(raw).to_bytes(8, "little") + raw + payload)
        needle = str(f)
    elif kind == "bad dtype":
        name = data.draw(st.sampled_from(sorted(k for k in h if k != "__metadata__")))
        h[name] = dict(h[name], dtype=data.draw(st.sampled_from(["F4", "Q8", "", "bf16", "F8_E4M3FN"])))
        write_header(f, h, payload)
        needle = name
    elif kind == "overlap":  # two tensors claim the same bytes
        a, b = data.draw(st.lists(st.sampled_from(sorted(
            k for k in h if k != "__metadata__" and h[k]["dtype"] == "U8")), min_size=2, max_size=2, unique=True))
        if h[a]["shape"] != h[b]["shape"]:
            h[b] = dict(h[b], shape=h[a]["shape"])
        h[b] = dict(h[b], data_offsets=h[a]["data_offsets"])
        write_header(f, h, payload)
        needle = "tensor language_model.model.dspark."
    else:
        write_header(f, h, payload + bytes(data.draw(st.integers(1, 64))))
        needle = "after the last tensor"
    convert_refused(src, str(f), needle)
    record("checkpoints", f"corrupt header: {kind}", "exit 2, file (and tensor)")


# ------------------------------------------------------------------------ shards and the index
def shard(d: Path, t: dict, k: int, rng, overlap: int = 0, index: bool = True) -> list[list[str]]:
    names = sorted(t)
    order = [names[i] for i in torch.randperm(len(names), generator=rng)]
    parts = [order[i::k] for i in range(k)]
    for j in range(overlap):  # copy a tensor of shard j into shard j+1
        parts[(j + 1) % k].append(parts[j % k][0])
    (d / ST).unlink()
    files = [f"model-{i + 1:05d}-of-{k:05d}.safetensors" for i in range(k)]
    for f, p in zip(files, parts):
        save(d, {n: t[n] for n in p}, f)
    if index:
        wm = {n: f for f, p in zip(files, parts) for n in p}
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    return parts


@CASES
@given(k=st.integers(2, 4), overlap=st.integers(1, 3), index=st.booleans(), seed=st.integers(0, 2**31))
def test_duplicate_across_shards(k, overlap, index, seed, base, work):
    src = clone(base, work)
    shard(src, tensors(src), k, torch.Generator().manual_seed(seed), overlap=overlap, index=index)
    err = convert_refused(src, "also appears in", "tensor language_model.model.dspark.")
    assert str(src / "model-") in err
    record("checkpoints", "duplicate tensor name across shards", "exit 2, tensor and both files")


@CASES
@given(k=st.integers(2, 4), seed=st.integers(0, 2**31), data=st.data())
def test_index_missing_or_wrong_shard(k, seed, data, base, work):
    src = clone(base, work)
    parts = shard(src, tensors(src), k, torch.Generator().manual_seed(seed))
    idx = src / "model.safetensors.index.json"
    kind = data.draw(st.sampled_from(["missing shard", "wrong shard", "unknown tensor"]))
    if kind == "missing shard":
        i = data.draw(st.integers(0, k - 1))
        victim = src / f"model-{i + 1:05d}-of-{k:05d}.safetensors"
        victim.unlink()
        convert_refused(src, str(idx), victim.name, parts[i][0] if sorted(parts[i])[0] == parts[i][0] else "tensor")
    else:
        wm = json.loads(idx.read_text())
        name = data.draw(st.sampled_from(sorted(wm["weight_map"])))
        if kind == "wrong shard":
            others = [f for f in sorted(set(wm["weight_map"].values())) if f != wm["weight_map"][name]]
            wm["weight_map"][name] = data.draw(st.sampled_from(others))
        else:
            name = name + ".ghost"
            wm["weight_map"][name] = data.draw(st.sampled_from(sorted(set(wm["weight_map"].values()))))
        idx.write_text(json.dumps(wm))
        convert_refused(src, str(idx), name)
    record("checkpoints", f"index: {kind}", "exit 2, index file, shard and tensor")


# ------------------------------------------------------------------------ dtypes, scales, values
@CASES
@given(data=st.data())
def test_wrong_weight_or_scale_dtype(data, base, work):
    src = clone(base, work)
    t = tensors(src)
    scale = data.draw(st.sampled_from(scale_names(t)))
    weight = scale[: -len("_scale_inv")]
    if data.draw(st.booleans()):
        name, dt = weight, data.draw(st.sampled_from([torch.bfloat16, torch.float16, torch.float32, torch.uint8, torch.int8, torch.float8_e5m2]))
        t[name] = t[name].to(torch.float32).to(dt)
        what = "weight"
    else:
        name, dt = scale, data.draw(st.sampled_from([torch.int32, torch.float32, torch.bfloat16, torch.int8, torch.int16, torch.float16]))
        t[name] = t[name].to(dt)
        what = "scale"
    save(src, t)
    convert_refused(src, str(src / ST), name, f"MXFP8 {what} must be")
    record("checkpoints", f"wrong MXFP8 {what} dtype", "exit 2, tensor and file")


@CASES
@given(data=st.data(), e8m0=st.booleans())
def test_scale_byte_255(data, e8m0, base, work):
    src = clone(base, work)
    t = tensors(src)
    name = data.draw(st.sampled_from(scale_names(t)))
    s = t[name].clone()
    r = data.draw(st.integers(0, s.shape[0] - 1))
    c = data.draw(st.integers(0, s.shape[1] - 1))
    s[r, c] = 255
    for _ in range(data.draw(st.integers(0, 3))):
        s[data.draw(st.integers(0, s.shape[0] - 1)), data.draw(st.integers(0, s.shape[1] - 1))] = 255
    t[name] = s.view(torch.float8_e8m0fnu) if e8m0 else s
    save(src, t)
    convert_refused(src, str(src / ST), name, "scale byte 255")
    record("checkpoints", "scale byte 255 (NaN) at random positions, U8 or E8M0", "exit 2, tensor and file")


@CASES
@given(data=st.data())
def test_scale_shape_mismatch(data, base, work):
    src = clone(base, work)
    t = tensors(src)
    name = data.draw(st.sampled_from(scale_names(t)))
    rows, cols = t[name].shape
    shape = data.draw(st.sampled_from([
        (rows, cols - 1), (rows, cols + 1), (rows - 1, cols), (rows * 2, cols), (rows, cols, 1), (rows * cols,), (cols, rows)]))
    assume(tuple(shape) != (rows, cols) and shape[0] > 0 and shape[-1] > 0)
    t[name] = torch.full(shape, 127, dtype=torch.uint8)
    save(src, t)
    convert_refused(src, str(src / ST), name, "scale shape")
    record("checkpoints", "scale shape does not match the weight", "exit 2, tensor and file")


@CASES
@given(data=st.data(), bad=st.sampled_from(["nan", "inf", "-inf"]))
def test_nan_or_inf_in_output(data, bad, base, work):
    src = clone(base, work)
    t = tensors(src)
    name = data.draw(st.sampled_from(sorted(k for k in t if not k.endswith("_scale_inv"))))
    x = t[name].clone()
    flat = x.view(-1) if x.dtype != torch.float8_e4m3fn else x.view(torch.uint8).view(-1)
    i = data.draw(st.integers(0, flat.numel() - 1))
    if x.dtype == torch.float8_e4m3fn:
        flat[i] = 0x7F if bad != "-inf" else 0xFF  # E4M3FN has no Inf: its NaN codes
    else:
        flat[i] = float(bad)
    t[name] = x
    save(src, t)
    convert_refused(src, str(src / ST), name, "NaN or Inf")
    record("checkpoints", "NaN/Inf in a source tensor (any produced tensor)", "exit 2, tensor and file")


@CASES
@given(data=st.data())
def test_missing_or_unexpected_tensor(data, base, work):
    src = clone(base, work)
    t = tensors(src)
    name = data.draw(st.sampled_from(sorted(t)))
    kind = data.draw(st.sampled_from(["missing", "unexpected", "renamed"]))
    if kind == "missing":
        del t[name]
    elif kind == "unexpected":
        stem, last = name.rsplit(".", 1)
        t[f"{stem}_extra.{last}"] = t[name].clone()
        name = f"{stem}_extra.{last}"
    else:
        t[name + "x"] = t.pop(name)
    save(src, t)
    err = convert_refused(src, "MISSING" if kind != "unexpected" else "UNEXPECTED")
    short = name.split("dspark.")[-1].replace("decoder_layer.", "")
    assert short.split(".")[-2].removesuffix("x") in err, err  # the tensor (in target or source spelling)
    if kind != "missing":
        assert str(src / ST) in err, err  # a tensor some file holds: that file is named
    # and inspect reports the same problem with exit 1 and no traceback
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(["inspect", "adapter=minimax_dspark", f"source={src}"])
    assert rc == 1 and "loading report" in o.getvalue(), (rc, e.getvalue())
    record("checkpoints", f"{kind} tensor (convert exit 2, inspect exit 1)", "names the tensor and file/folder")


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@CASES
@given(kind=st.sampled_from(["not json", "json list", "bad torch_dtype", "missing", "no safetensors"]),
       junk=st.text(max_size=20))
def test_bad_config_or_folder(kind, junk, base, work):
    src = clone(base, work)
    cfg = src / "config.json"
    if kind == "not json":
        assume(not _parses("{" + junk))  # junk "}" makes "{}", which is JSON
        cfg.write_text("{" + junk)
        needle = str(cfg)
    elif kind == "json list":
        cfg.write_text(json.dumps([junk]))
        needle = str(cfg)
    elif kind == "bad torch_dtype":
        c = json.loads(cfg.read_text())
        c["torch_dtype"] = c["text_config"]["torch_dtype"] = "int" + str(len(junk))
        cfg.write_text(json.dumps(c))
        needle = "torch_dtype"
    elif kind == "missing":
        cfg.unlink()
        needle = str(cfg)
    else:
        (src / ST).unlink()
        needle = str(src)
    convert_refused(src, needle)
    record("checkpoints", f"bad folder/config: {kind}", "exit 2, names the file")


def test_pristine_converts(base, work):
    """The control: the uncorrupted checkpoint converts (the refusals above are not a broken converter)."""
    src = clone(base, work)
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(["convert", "adapter=minimax_dspark", f"source={src}", f"out={src.parent / 'out'}"])
    assert rc == 0, e.getvalue()
    assert (src.parent / "out" / ST).is_file()
