"""Reading checkpoint folders: ``config.json`` and safetensors headers (no tensor data)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ...transforms.base import ST_TO_TORCH, TensorMeta

from ..errors import UserError


@dataclass(frozen=True)
class SourceTensor:
    """A tensor in a source checkpoint: where it lives and its header metadata."""

    name: str
    file: Path
    meta: TensorMeta


def read_config(source: Path) -> dict:
    """``source/config.json``; points users at ``dspark/`` when they give the target's root."""
    path = source / "config.json"
    if not source.is_dir():
        raise UserError(f"{source}: no such checkpoint directory")
    if not path.is_file():
        raise UserError(f"{path}: missing (is {source} a drafter checkpoint folder?)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a JSON object")
    return raw


def drafter_subfolder_hint(source: Path) -> str:
    for sub in ("dspark", "dflash", "drafter", "draft"):
        if (source / sub / "config.json").is_file():
            return f" (this looks like the target model's root: the drafter is in {source / sub})"
    return ""


def shard_files(source: Path) -> list[Path]:
    """The safetensors files of a checkpoint: from the index json, else every ``*.safetensors``."""
    index = source / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v and "/" not in v and v not in (".", "..")
                for k, v in weight_map.items()
            ):
                raise TypeError("weight_map must map tensor names to shard file names in this folder")
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
            raise UserError(f"{index}: not a safetensors index ({e})") from None
        files = sorted({source / f for f in weight_map.values()})
        for f in files:
            if not f.is_file():
                held = sorted(k for k, v in weight_map.items() if v == f.name)
                raise UserError(f"{index}: names shard {f.name}, which does not exist "
                                f"(it should hold {len(held)} tensor(s): {', '.join(held[:3])}{', ...' if len(held) > 3 else ''})")
        return files
    files = sorted(source.glob("*.safetensors"))
    if not files:
        raise UserError(f"{source}: no *.safetensors files{drafter_subfolder_hint(source)}")
    return files


def read_header(path: Path) -> dict[str, TensorMeta]:
    """Names, shapes and dtypes of one safetensors file, checked against the file size."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise UserError(f"{path}: truncated (no safetensors header)")
        n = int.from_bytes(head, "little")
        if n > min(size - 8, 100 * 2**20):
            raise UserError(f"{path}: header length {n} exceeds the file ({size} bytes): truncated or not safetensors")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise UserError(f"{path}: header is not valid JSON") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: header is not a JSON object")
    header.pop("__metadata__", None)
    out: dict[str, TensorMeta] = {}
    spans: list[tuple[int, int, str]] = []
    data_len = size - 8 - n
    for name, info in header.items():
        try:
            dtype = ST_TO_TORCH[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            start, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{path}: tensor {name}: malformed header entry {info!r}") from None
        meta = TensorMeta(shape, dtype)
        if any(s < 0 for s in shape) or end - start != meta.nbytes or start < 0:
            raise UserError(
                f"{path}: tensor {name}: header says {meta} ({meta.nbytes} bytes) but its data "
                f"offsets span {end - start} bytes"
            )
        if end > data_len:
            raise UserError(f"{path}: tensor {name}: data ends at {end} past the file's {data_len} data bytes (truncated)")
        out[name] = meta
        spans.append((start, end, name))
    # the data must tile the buffer exactly (what the safetensors library itself demands)
    pos = 0
    for start, end, name in sorted(spans):
        if start != pos:
            what = "overlaps the previous tensor" if start < pos else f"leaves a gap of {start - pos} bytes before it"
            raise UserError(f"{path}: tensor {name}: data offsets [{start}, {end}] {what} (corrupt header)")
        pos = end
    if pos != data_len:
        raise UserError(f"{path}: {data_len - pos} bytes after the last tensor's data (corrupt or not safetensors)")
    return out


def read_headers(source: Path) -> dict[str, SourceTensor]:
    """Every tensor of a (possibly sharded) checkpoint; duplicate names across shards refused."""
    tensors: dict[str, SourceTensor] = {}
    for file in shard_files(source):
        for name, meta in read_header(file).items():
            if name in tensors:
                raise UserError(f"{file}: tensor {name} also appears in {tensors[name].file.name}")
            tensors[name] = SourceTensor(name, file, meta)
    index = source / "model.safetensors.index.json"
    if index.is_file():  # shard_files checked that it parses
        for name, shard in json.loads(index.read_text(encoding="utf-8"))["weight_map"].items():
            if name not in tensors:
                raise UserError(f"{index}: tensor {name}: listed in {shard}, which does not hold it")
            if tensors[name].file.name != shard:
                raise UserError(f"{index}: tensor {name}: listed in {shard} but found in {tensors[name].file.name}")
    return tensors
