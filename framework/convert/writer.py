"""Streaming safetensors writer: the header is fixed from metadata first, then each
tensor's bytes are written at its offset, so a shard never has to sit in memory.

Layout (the safetensors format): 8-byte little-endian header length, the JSON header
(padded with spaces to a multiple of 8), then the data. Deterministic for equal inputs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ...transforms.base import TensorMeta, torch_tables

if TYPE_CHECKING:
    import torch


class ShardWriter:
    def __init__(self, path: Path, metas: dict[str, TensorMeta], metadata: dict[str, str] | None = None):
        self.path = path
        self.metas = metas
        torch_to_st = torch_tables()["TORCH_TO_ST"]
        header: dict = {"__metadata__": metadata or {"format": "pt"}}
        offset = 0
        self.offsets: dict[str, int] = {}
        for name, m in metas.items():
            header[name] = {"dtype": torch_to_st[m.dtype], "shape": list(m.shape), "data_offsets": [offset, offset + m.nbytes]}
            self.offsets[name] = offset
            offset += m.nbytes
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        self.data_start = 8 + len(raw)
        self.size = self.data_start + offset
        self.fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
        self._pwrite(len(raw).to_bytes(8, "little") + raw, 0)
        os.ftruncate(self.fd, self.size)
        self.written: set[str] = set()

    def _pwrite(self, data, pos: int) -> None:
        view, done = memoryview(data).cast("B"), 0
        while done < len(view):  # one write takes at most ~2 GiB on Linux
            done += os.pwrite(self.fd, view[done:], pos + done)

    def write(self, name: str, t: torch.Tensor) -> None:
        """Write ``name``'s bytes at its offset (positional: safe from several threads)."""
        import torch

        m = self.metas[name]
        if tuple(t.shape) != m.shape or t.dtype != m.dtype:
            raise RuntimeError(f"internal: {name} is {tuple(t.shape)} {t.dtype}, planned {m}")
        data = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
        self._pwrite(data, self.data_start + self.offsets[name])
        self.written.add(name)

    def write_span(self, names: list[str], data, after_each=None) -> None:
        """Write ``names`` (consecutive in this shard's layout) from ``data``: their bytes
        back to back, exactly spanning them; one positional write."""
        start = self.offsets[names[0]]
        last = self.metas[names[-1]]
        if len(data) != self.offsets[names[-1]] + last.nbytes - start:
            raise RuntimeError(f"internal: {names[0]}..{names[-1]}: {len(data)} bytes do not span them")
        self._pwrite(data, self.data_start + start)
        for name in names:
            self.written.add(name)
            if after_each is not None:
                after_each()

    def abort(self) -> None:
        """Close the file without the completeness check (the caller discards it)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        missing = set(self.metas) - self.written
        self.abort()
        if missing:
            raise RuntimeError(f"internal: {self.path.name}: tensors never written: {sorted(missing)[:3]}")


def shard_layout(metas: dict[str, TensorMeta], max_bytes: int) -> list[dict[str, TensorMeta]]:
    """Greedy shards in layout order, each at most ``max_bytes`` (a larger tensor gets its own)."""
    shards: list[dict[str, TensorMeta]] = [{}]
    size = 0
    for name, m in metas.items():
        if shards[-1] and size + m.nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = m
        size += m.nbytes
    return shards


def shard_names(n: int) -> list[str]:
    if n == 1:
        return ["model.safetensors"]
    return [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


class ShardedSaver:
    """Collects tensors into shards of about ``max_bytes`` and saves each as it fills;
    :meth:`finish` names them ``model.safetensors`` (one shard) or
    ``model-0000i-of-0000n.safetensors`` with ``model.safetensors.index.json``."""

    def __init__(self, folder: Path, max_bytes: int):
        import torch

        self.folder, self.max_bytes = Path(folder), max_bytes
        self.files: list[str] = []
        self.weight_map: dict[str, str] = {}
        self.shard: dict[str, torch.Tensor] = {}
        self.size = 0

    def add(self, name: str, t: torch.Tensor) -> None:
        n = t.numel() * t.element_size()
        if self.shard and self.size + n > self.max_bytes:
            self.flush()
        self.shard[name] = t.contiguous()
        self.size += n

    def flush(self) -> None:
        from safetensors.torch import save_file

        if self.shard:
            name = f"part-{len(self.files) + 1:05d}.safetensors"
            save_file(self.shard, str(self.folder / name), metadata={"format": "pt"})
            self.files.append(name)
            self.weight_map.update({k: name for k in self.shard})
        self.shard, self.size = {}, 0

    def finish(self) -> None:
        self.flush()
        final = dict(zip(self.files, shard_names(len(self.files))))
        for f, g in final.items():
            (self.folder / f).rename(self.folder / g)
        if len(self.files) > 1:
            index = {"metadata": {}, "weight_map": {k: final[v] for k, v in sorted(self.weight_map.items())}}
            (self.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


#: tensors smaller than this are written by the caller, not the writer thread
INLINE_BYTES = 1 << 20


class WriteQueue:
    """Writes ``(ShardWriter, name, tensor)`` items on one background thread, so that file
    I/O overlaps the next group's conversion; at most ``depth`` items wait (bounded memory).
    An error on the writer thread is raised by the next :meth:`put` or by :meth:`close`."""

    def __init__(self, depth: int = 2, after_write=None):
        import queue
        import threading

        self.q: "queue.Queue" = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.after_write = after_write
        self.thread = threading.Thread(target=self._run, name="draftsmith-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (item := self.q.get()) is not None:
            if self.error is None:
                try:
                    writer, name, t = item
                    writer.write(name, t)
                    if self.after_write:
                        self.after_write()
                except BaseException as e:  # handed to the main thread
                    self.error = e

    def put(self, writer: ShardWriter, name: str, t: torch.Tensor) -> None:
        """Queue ``t`` for writing; a tensor under :data:`INLINE_BYTES` is written here and
        now (handing it to the thread would cost more than the write; writes are positional,
        so both threads may write one file)."""
        if self.error is not None:
            raise self.error
        if t.numel() * t.element_size() < INLINE_BYTES:
            writer.write(name, t)
            if self.after_write:
                self.after_write()
            return
        self.q.put((writer, name, t))

    def close(self, check: bool = True) -> None:
        """Finish the pending writes; with ``check``, raise the writer thread's error."""
        self.q.put(None)
        self.thread.join()
        if check and self.error is not None:
            raise self.error
