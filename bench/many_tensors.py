"""Plan and report scale linearly in tensor count: ``inspect`` / ``convert`` of a tiny
synthetic MiniMax DSpark checkpoint plus one extra shard whose header lists N one-element
tensors (N = 100 000 by default: a ~7 MB header). Every extra tensor is UNEXPECTED, so the
run ends in a refusal (exit 1 for inspect, 2 for convert) with a report line per tensor.

Prints wall time of each command for each N; with a linear plan the time per tensor stays
flat as N grows (the old quadratic ``Plan.problem_lines`` took > 900 s at 100 000).

Usage: ``python bench/many_tensors.py [N ...]`` (default: 10000 100000).
The test ``tests/test_hostile_checkpoints.py::test_100k_tensor_header_in_seconds`` bounds it.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
import sys
import tempfile
import time
from pathlib import Path


def write_many_tensor_shard(path: Path, n: int, prefix: str = "model.layers.{i}.extra.weight") -> None:
    """A valid safetensors file with ``n`` float32 scalars-of-shape-[1] (header ~70 bytes each)."""
    header, off = {}, 0
    for i in range(n):
        header[prefix.format(i=i)] = {"dtype": "F32", "shape": [1], "data_offsets": [off, off + 4]}
        off += 4
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        f.write(b"\0" * off)


def make_source(root: Path, n: int) -> Path:
    """A tiny synthetic minimax_dspark source with an extra shard of ``n`` tensors."""
    from draftsmith.framework.compile.engine import load_adapter
    from draftsmith.framework.convert.synth import synthesize

    src = root / f"src-{n}"
    synthesize(load_adapter("minimax_dspark"), "tiny", src, seed=3)
    index = src / "model.safetensors.index.json"
    if index.exists():  # keep a sharded source consistent: list the extra shard's tensors
        data = json.loads(index.read_text())
        data["weight_map"].update({f"model.layers.{i}.extra.weight": "extra.safetensors" for i in range(n)})
        index.write_text(json.dumps(data))
    write_many_tensor_shard(src / "extra.safetensors", n)
    return src


def run_cli(args: list[str]) -> tuple[int, float, str]:
    from draftsmith.framework.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    t = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, time.perf_counter() - t, err.getvalue()


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [10_000, 100_000]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n in sizes:
            src = make_source(root, n)
            for cmd in (["inspect", f"source={src}"], ["convert", f"source={src}", f"out={root / f'out-{n}'}"]):
                rc, dt, err = run_cli(cmd + ["adapter=minimax_dspark"])
                print(f"{cmd[0]:8s} N={n:>7d}  exit {rc}  {dt:6.2f} s  ({dt / n * 1e6:.1f} us/tensor)  "
                      f"stderr {len(err.splitlines())} lines")


if __name__ == "__main__":
    main(sys.argv[1:])
