"""Read-only bandwidth ceilings of one CUDA GPU: HBM and L2, with one streaming Triton kernel.

The attention kernel only reads (K/V tiles, from HBM once, and from L2 again when two
programs share a tile), so besides the copy ceiling (read + write) the benches report:

- ``hbm``: every 16 KB tile of a 2 GiB buffer read once (bytes read per second);
- ``l2``: a 16 MiB buffer (it fits in the 50 MB L2 of an H100/H200) read over and over,
  1 GiB in all (the first pass comes from HBM: a slight underestimate of L2).

Programs: two per multiprocessor, each walks tiles ``pid, pid + P, pid + 2P, ...`` with
pipelined 16-byte loads and keeps a float32 sum (stored, so nothing is optimised away).
Times: CUDA-graph replays, median (bench/attention.py ``bench_graph``).

Usage: ``python3 bench/read_ceiling.py``.
"""

import torch
import triton
import triton.language as tl

from draftsmith.lowering.jit import jitted

TILE = 8192  # bf16 elements per load step: 16 KB


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
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    progs = 2 * sms
    x = torch.randn(buffer_bytes // 2, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(progs * TILE, dtype=torch.float32, device="cuda")
    n_tiles = x.numel() // TILE
    steps = triton.cdiv(total_bytes // (2 * TILE), progs)
    ms = bench_graph(lambda: kern[(progs,)](x, out, n_tiles, steps, TILE=TILE, num_warps=8))
    return progs * steps * TILE * 2 / (ms * 1e-3) / 1e12


def ceilings(bench_graph) -> dict:
    """``{"hbm_read_TBps": ..., "l2_read_TBps": ...}``."""
    return {"hbm_read_TBps": read_tbps(2 << 30, 2 << 30, bench_graph),
            "l2_read_TBps": read_tbps(16 << 20, 1 << 30, bench_graph)}


if __name__ == "__main__":
    from attention import bench_graph

    print(torch.cuda.get_device_name(), ceilings(bench_graph))
