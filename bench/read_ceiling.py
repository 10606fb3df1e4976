"""Read-only bandwidth ceilings of one CUDA GPU: HBM and L2, with one streaming Triton kernel.

The attention kernel only reads (K/V tiles, from HBM once, and from L2 again when two
programs share a tile), so besides the copy ceiling (read + write) the benches report:

- ``hbm``: every 16 KB tile of a 2 GiB buffer read once (bytes read per second);
- ``l2``: a 16 MiB buffer (it fits in the 50 MB L2 of an H100/H200) read over and over,
  1 GiB in all (the first pass comes from HBM: a slight underestimate of L2).

Programs: two per multiprocessor, each walks tiles ``pid, pid + P, pid + 2P, ...`` with
pipelined 16-byte loads and keeps a float32 sum (stored, so nothing is optimised away).
Times: CUDA-graph replays, median (``timing.bench_graph``).

Usage: ``python3 bench/read_ceiling.py [--tiny]`` (``--tiny``: 1 MiB buffers, a smoke run, also
on CPU under ``TRITON_INTERPRET=1``).
"""

import torch
import triton
import triton.language as tl

import timing
from draftsmith.lowering.jit import jitted, sm_count

TILE = 8192  # bf16 elements per load step: 16 KB
WHAT = "read-only streams: 2 GiB once (HBM), 16 MiB x 64 (L2)"


def _stream_kernel(x_ptr, out_ptr, n_tiles, steps, TILE: tl.constexpr):
    """Program ``pid`` reads tiles ``(pid + i * P) % n_tiles`` for ``i < steps``; stores its sum."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, TILE)
    acc = tl.zeros([TILE], dtype=tl.float32)
    for i in tl.range(0, steps, num_stages=4):
        t = ((pid + i * nprog) % n_tiles).to(tl.int64)
        acc += tl.load(x_ptr + t * TILE + offs).to(tl.float32)
    tl.store(out_ptr + pid.to(tl.int64) * TILE + offs, acc)


def read_tbps(buffer_bytes: int, total_bytes: int, bench_graph) -> float:
    """TB/s of reading ``total_bytes`` out of a ``buffer_bytes`` buffer (see module doc)."""
    (kern,) = jitted(_stream_kernel)
    dev = timing.device()
    progs = 2 * sm_count(dev)
    x = torch.randn(buffer_bytes // 2, dtype=torch.bfloat16, device=dev)
    out = torch.empty(progs * TILE, dtype=torch.float32, device=dev)
    n_tiles = x.numel() // TILE
    steps = triton.cdiv(total_bytes // (2 * TILE), progs)
    ms = bench_graph(lambda: kern[(progs,)](x, out, n_tiles, steps, TILE=TILE, num_warps=8))
    return progs * steps * TILE * 2 / (ms * 1e-3) / 1e12


def ceilings(bench_graph, tiny: bool = False) -> dict:
    """``{"hbm_read_TBps": ..., "l2_read_TBps": ...}`` (``tiny``: 1 MiB read once and twice)."""
    if tiny:
        return {"hbm_read_TBps": read_tbps(1 << 20, 1 << 20, bench_graph),
                "l2_read_TBps": read_tbps(1 << 20, 2 << 20, bench_graph)}
    return {"hbm_read_TBps": read_tbps(2 << 30, 2 << 30, bench_graph),
            "l2_read_TBps": read_tbps(16 << 20, 1 << 30, bench_graph)}


if __name__ == "__main__":
    import sys

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(name, ceilings(timing.bench_graph, tiny="--tiny" in sys.argv[1:]))
