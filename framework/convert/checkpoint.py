"""The one hardened reader of checkpoint folders: ``config.json``, the safetensors index and
headers (no tensor data), for every command that reads a checkpoint (inspect, convert,
draft, export, emit's binding; source, converted and target folders alike).

Every file must be a regular file (``stat`` before ``open``: FIFOs, devices, directories
refused), is read with a byte limit counted while reading, and is parsed as strict JSON
(framework/io/safe_read.py). Index entries must name shard files in the folder itself
(no ``/``, ``..``); headers are checked against the file (dtypes, integer shapes and
offsets that tile the data exactly) before any tensor data is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...transforms.base import TensorMeta, torch_tables

from ..errors import UserError
from ..io.safe_read import (MAX_CONFIG_BYTES, MAX_INDEX_BYTES, check_regular, is_regular, load_json, open_regular,
                            parse_json)

if TYPE_CHECKING:
    import torch

#: a safetensors header (the format's own readers cap it at 100 MB)
MAX_HEADER_BYTES = 100 * 2**20
INDEX = "model.safetensors.index.json"
#: most shard files an index may list (the largest published checkpoints have a few thousand)
MAX_INDEX_SHARDS = 1 << 16


@dataclass(frozen=True)
class SourceTensor:
    """A tensor in a source checkpoint: where it lives and its header metadata.
    ``offset``: the byte position of its data in ``file`` (-1: not in a file)."""

    name: str
    file: Path
    meta: TensorMeta
    offset: int = -1


def read_config(source: Path) -> dict:
    """``source/config.json``; points users at ``dspark/`` when they give the target's root."""
    path = source / "config.json"
    if not source.is_dir():
        raise UserError(f"{source}: no such checkpoint directory")
    if not path.exists():
        raise UserError(f"{path}: missing (is {source} a drafter checkpoint folder?)")
    raw = load_json(path, MAX_CONFIG_BYTES, "config.json")
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a JSON object")
    return raw


def drafter_subfolder_hint(source: Path) -> str:
    for sub in ("dspark", "dflash", "drafter", "draft"):
        if is_regular(source / sub / "config.json"):
            return f" (this looks like the target model's root: the drafter is in {source / sub})"
    return ""


def read_index(source: Path) -> dict[str, str] | None:
    """``weight_map`` of ``source``'s index (tensor name -> shard file name in ``source``),
    or None when there is no index. Shard names that leave the folder are refused."""
    index = source / INDEX
    if not os.path.lexists(index):
        return None
    data = load_json(index, MAX_INDEX_BYTES, "safetensors index")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise UserError(f"{index}: not a safetensors index (no weight_map object)")
    if not weight_map:
        raise UserError(f"{index}: weight_map is empty (the index lists no tensor)")
    meta = data.get("metadata", {})
    if not isinstance(meta, dict):
        raise UserError(f"{index}: metadata: expected a JSON object, found {type(meta).__name__}")
    # not used by draftsmith (writers differ in what they count; some write it as 1.6e10),
    # but a value that is no byte count at all means this is not the index it claims to be
    size = meta.get("total_size", 0)
    if type(size) not in (int, float) or size < 0 or size != int(size):
        raise UserError(f"{index}: metadata.total_size: expected a non-negative whole number of bytes, "
                        f"found {str(size)[:40]!r}")
    shards = len({v for v in weight_map.values() if isinstance(v, str)})
    if shards > MAX_INDEX_SHARDS:
        raise UserError(f"{index}: lists {shards} shard files, more than {MAX_INDEX_SHARDS}; refused before opening any")
    for k, v in weight_map.items():
        if not (isinstance(v, str) and v and "/" not in v and "\\" not in v and v not in (".", "..")
                and "\0" not in v):
            raise UserError(f"{index}: tensor {k}: shard {v!r} is not a file name in this folder (refused)")
    return weight_map


_UNREAD = object()


def check_shard_link(path: Path, source: Path) -> None:
    """Refuse, by name and before it is opened, a shard that is a symbolic link leading out of
    ``source``. Links are followed only to a file inside ``source`` or, for a folder in a Hugging
    Face cache snapshot (``<repo>/snapshots/<commit>/...``), inside that repo's ``blobs/`` (the
    cache's own layout). The target's path and bytes never reach the message."""
    if not os.path.islink(path):
        return
    real = os.path.realpath(path)
    homes = [os.path.realpath(source)]
    snapshot = next((p for p in (source, *source.parents) if p.parent.name == "snapshots"), None)
    if snapshot is not None:  # a drafter folder inside a cached revision (its root or a subfolder)
        homes.append(os.path.realpath(snapshot.parent.parent / "blobs"))
    if not any(real.startswith(home + os.sep) for home in homes):
        raise UserError(f"{path}: a symbolic link leading out of the checkpoint folder{' and its cache blobs' if len(homes) > 1 else ''}; "
                        "refused (copy the shard into the folder)")


def shard_files(source: Path, weight_map=_UNREAD) -> list[Path]:
    """The safetensors files of a checkpoint: from the index json, else every ``*.safetensors``;
    each a regular file in ``source``. ``weight_map``: :func:`read_index`'s, if already read."""
    index = source / INDEX
    weight_map = read_index(source) if weight_map is _UNREAD else weight_map
    if weight_map is not None:
        files = sorted({source / f for f in weight_map.values()})
        for f in files:
            if not os.path.lexists(f):
                held = sorted(k for k, v in weight_map.items() if v == f.name)
                raise UserError(f"{index}: names shard {f.name}, which does not exist "
                                f"(it should hold {len(held)} tensor(s): {', '.join(held[:3])}{', ...' if len(held) > 3 else ''})")
            check_shard_link(f, source)
            check_regular(f, f"shard named by {INDEX}")
        return files
    files = sorted(source.glob("*.safetensors"))
    if not files:
        raise UserError(f"{source}: no *.safetensors files{drafter_subfolder_hint(source)}")
    for f in files:
        check_shard_link(f, source)
        check_regular(f, "safetensors shard")
    return files


def read_header(path: Path) -> dict[str, tuple[TensorMeta, int]]:
    """Name -> (shape and dtype, byte position of its data in the file) of one safetensors
    file, checked against the file size (data offsets tile the data exactly). Linear in the
    number of tensors."""
    st_to_torch = torch_tables()["ST_TO_TORCH"]
    with open_regular(path, "safetensors shard") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise UserError(f"{path}: truncated (no safetensors header)")
        n = int.from_bytes(head, "little")
        if n > min(size - 8, MAX_HEADER_BYTES):  # the value is the file's own bytes: never shown
            raise UserError(f"{path}: its first 8 bytes are no header length within the file ({size} bytes) "
                            f"and {MAX_HEADER_BYTES} bytes: truncated or not safetensors")
        blob = f.read(n)
        if len(blob) < n:
            raise UserError(f"{path}: truncated (header shorter than its stated {n} bytes)")
    try:
        header = parse_json(blob, path)
    except UserError as e:
        raise UserError(f"{path}: header is not valid JSON ({str(e).split(': ', 1)[-1]})") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: header is not a JSON object")
    meta_block = header.pop("__metadata__", None)
    if meta_block is not None and not isinstance(meta_block, dict):
        raise UserError(f"{path}: __metadata__ is not a JSON object")
    out: dict[str, tuple[TensorMeta, int]] = {}
    spans: list[tuple[int, int, str]] = []
    data_len = size - 8 - n
    base = 8 + n
    metas: dict[tuple, TensorMeta] = {}
    try:  # a name is UTF-8 (safetensors' own writers cannot make a lone surrogate; regexes need UTF-8)
        "".join(header).encode("utf-8")
    except UnicodeEncodeError:
        bad = next(k for k in header if not _utf8(k))
        raise UserError(f"{path}: tensor {bad.encode('utf-8', 'backslashreplace').decode()}: name holds a lone "
                        "surrogate (not UTF-8)") from None
    for name, info in header.items():
        shape = offsets = dtype = None
        if type(info) is dict:
            dtype = st_to_torch.get(info.get("dtype")) if type(info.get("dtype")) is str else None
            shape, offsets = info.get("shape"), info.get("data_offsets")
        # JSON integers only (not bools, floats or strings): ``type() is int``
        if (dtype is None or type(shape) is not list or type(offsets) is not list or len(offsets) != 2
                or not all(type(v) is int for v in shape) or type(offsets[0]) is not int
                or type(offsets[1]) is not int):
            shown = repr(info)
            raise UserError(f"{path}: tensor {name}: malformed header entry "
                            f"{shown[:200]}{'...' if len(shown) > 200 else ''} (shape and data_offsets "
                            "must be lists of integers)")
        start, end = offsets
        key = (tuple(shape), dtype)
        meta = metas.get(key)
        if meta is None:  # one TensorMeta per distinct shape and dtype (most tensors share one)
            meta = metas[key] = TensorMeta(*key)
        if start < 0 or end - start != meta.nbytes or any(s < 0 for s in shape):
            raise UserError(
                f"{path}: tensor {name}: header says {meta} ({meta.nbytes} bytes) but its data "
                f"offsets span {end - start} bytes"
            )
        if end > data_len:
            raise UserError(f"{path}: tensor {name}: data ends at {end} past the file's {data_len} data bytes (truncated)")
        out[name] = (meta, base + start)
        spans.append((start, end, name))
    # the data must tile the buffer exactly (what the safetensors library itself demands)
    pos = 0
    spans.sort()
    for start, end, name in spans:
        if start != pos:
            what = "overlaps the previous tensor" if start < pos else f"leaves a gap of {start - pos} bytes before it"
            raise UserError(f"{path}: tensor {name}: data offsets [{start}, {end}] {what} (corrupt header)")
        pos = end
    if pos != data_len:
        raise UserError(f"{path}: {data_len - pos} bytes after the last tensor's data (corrupt or not safetensors)")
    return out


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def read_headers(source: Path) -> dict[str, SourceTensor]:
    """Every tensor of a (possibly sharded) checkpoint; duplicate names across shards refused."""
    tensors: dict[str, SourceTensor] = {}
    weight_map = read_index(source)
    for file in shard_files(source, weight_map):
        for name, (meta, offset) in read_header(file).items():
            if name in tensors:
                raise UserError(f"{file}: tensor {name} also appears in {tensors[name].file.name}")
            tensors[name] = SourceTensor(name, file, meta, offset)
    index = source / INDEX
    if weight_map is not None:
        for name, shard in weight_map.items():
            if name not in tensors:
                raise UserError(f"{index}: tensor {name}: listed in {shard}, which does not hold it")
            if tensors[name].file.name != shard:
                raise UserError(f"{index}: tensor {name}: listed in {shard} but found in {tensors[name].file.name}")
        if len(tensors) != len(weight_map):  # a shard holds tensors the index does not list
            extra = sorted(set(tensors) - set(weight_map))
            raise UserError(f"{index}: {len(extra)} tensor(s) of the shards are not listed "
                            f"({', '.join(f'{n} in {tensors[n].file.name}' for n in extra[:3])}{', ...' if len(extra) > 3 else ''})")
    return tensors


def locate(source: Path, names: list[str], optional: set[str] = frozenset()) -> dict[str, SourceTensor]:
    """Where ``names`` live in ``source`` (a target folder, possibly huge): only the shards
    that the index names for them are opened, their headers checked like any other. A name
    missing (and not ``optional``) is refused in one line."""
    weight_map = read_index(source)
    if weight_map is None:
        files = shard_files(source, None)
    else:
        files = sorted({source / weight_map[n] for n in names if n in weight_map})
        for f in files:
            check_shard_link(f, source)
            check_regular(f, f"shard named by {INDEX}")
    found: dict[str, SourceTensor] = {}
    for f in files:
        header = read_header(f)
        for n in names:
            if n in header and n not in found:
                found[n] = SourceTensor(n, f, *header[n])
    for n in names:
        if n not in found and n not in optional:
            where = f" (the index lists it in {weight_map[n]})" if weight_map and n in weight_map else ""
            raise UserError(f"{source}: no tensor {n}{where}")
    return found


class TensorReader:
    """Reads checked tensors by their header's byte offsets (``pread``: no mapping, no
    header re-parse per tensor, so reading N tensors is linear in N), one open file per
    shard until :meth:`close`. Each tensor is a CPU torch tensor with memory of its own."""

    def __init__(self):
        self._files: dict[Path, object] = {}

    def read(self, st: SourceTensor) -> torch.Tensor:
        import torch

        flat = torch.empty(st.meta.nbytes, dtype=torch.uint8)  # not zero-filled: every byte is read into it
        self._read_into(st, memoryview(flat.numpy()))
        return flat.view(st.meta.dtype).reshape(st.meta.shape)

    def read_stacked(self, sts: list[SourceTensor]) -> torch.Tensor:
        """Tensors of one shape and dtype, read straight into one ``[len(sts), *shape]``
        tensor (one buffer, one read call each, no per-tensor torch work)."""
        import torch

        meta, n = sts[0].meta, sts[0].meta.nbytes
        flat = torch.empty(len(sts) * n, dtype=torch.uint8)
        view = memoryview(flat.numpy())
        for i, st in enumerate(sts):
            if st.meta != meta:
                raise RuntimeError(f"internal: {st.name} is {st.meta}, stacked with {meta}")
            self._read_into(st, view[i * n : (i + 1) * n])
        return flat.view(meta.dtype).reshape(len(sts), *meta.shape)

    def _read_into(self, st: SourceTensor, view: memoryview) -> None:
        """Fill ``view`` (``st.meta.nbytes`` bytes) with ``st``'s data (``pread`` at its offset)."""
        if st.offset < 0:
            raise UserError(f"{st.name}: not a tensor of a file")
        self.read_span(st.file, st.offset, view, f"tensor {st.name}")

    def read_span(self, file: Path, offset: int, view: memoryview, what: str) -> None:
        """Fill ``view`` with the bytes of ``file`` from ``offset`` on (``what``: for messages)."""
        f = self._files.get(file)
        if f is None:
            f = self._files[file] = open_regular(file, "safetensors shard")
        n, got = len(view), 0
        try:
            while got < n:  # one read returns at most ~2 GiB on Linux
                k = os.preadv(f.fileno(), [view[got:]], offset + got)
                if k == 0:
                    raise UserError(f"{file}: {what}: truncated (the file changed after its header was read)")
                got += k
        except OSError as e:
            raise UserError(f"{file}: {what}: cannot be read ({e.strerror or e})") from None

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()

    def __enter__(self) -> "TensorReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_tensor(st: SourceTensor) -> torch.Tensor:
    """The data of one checked tensor (a CPU torch tensor of its own)."""
    with TensorReader() as r:
        return r.read(st)


def read_checkpoint(source: Path) -> tuple[dict, dict]:
    """``(config, {name: tensor})`` of a checkpoint folder, every file checked as above."""
    source = Path(source)
    config = read_config(source)
    with TensorReader() as r:
        return config, {n: r.read(st) for n, st in read_headers(source).items()}
