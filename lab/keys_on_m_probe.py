"""Compile-only probe (triton 3.6's Gluon, sm_90a, no GPU): one tile of block attention with the keys on
wgmma's M ("swap AB", lab/NOTES-attention.md's thirtieth part), so that a program's packed rows are wgmma's N and
need no padding to 64. S^T = K Q^T (M = 64 keys, N = rows), a query's maximum and sum over the tile's keys (across
the warpgroup's four warps), P^T through shared memory, O^T = V^T P^T (M = head dim, V^T from shared memory).

Gluon's shapes are powers of two, so 96 rows (dflash2_minimax) cannot be one N = 96 tile (``--rows 96 --one``: the
compiler refuses it); they can be N = 64 + 32, two wgmmas each way (``--rows 96``). Prints the wgmma shapes of the
PTX, shared memory and the SASS opcode mix of the tile (straight-line code, one tile).

    PYTHONPATH=<triton 3.6>:.:lab python3 lab/keys_on_m_probe.py --rows 96
"""

import argparse
import collections

from sass_loops import INSTR, opcode, sass_of

try:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, warpgroup_mma,
                                                                  warpgroup_mma_wait)
except Exception:  # noqa: BLE001 - no triton, or one without Gluon's Hopper API
    gluon = None


def pieces(rows: int, one: bool) -> tuple:
    """``(NA, NB)``: ``rows`` as one power-of-two N piece (``one``, or a power of two already; ``NB`` 0) or as a
    power of two and the next power of two at or above the rest (96: 64 + 32; 112: 64 + 64; 28: 16 + 16)."""
    if one or rows & (rows - 1) == 0:
        return rows, 0
    na = 1 << (rows.bit_length() - 1)
    return na, 1 << (rows - na - 1).bit_length()


if gluon is not None:
    D = gl.constexpr(128)  # head dim
    BN = gl.constexpr(64)  # keys a tile: wgmma's M

    @gluon.jit
    def _piece(q_ptr, k_s, v_s, o_ptr, ROW0: gl.constexpr, N: gl.constexpr, R: gl.constexpr):
        """Rows ``ROW0 .. ROW0 + N - 1`` (those below ``R``) as one N piece: S^T = K Q^T, the softmax over the
        tile's keys (wgmma's M), P^T to shared memory, O^T = V^T P^T; O^T stored at ``o_ptr`` ([R, D]) and the
        sums after it."""
        ld: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        mn_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 16])
        r = ROW0 + gl.arange(0, N, layout=gl.SliceLayout(1, ld))
        dd = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
        q_s = gl.allocate_shared_memory(gl.bfloat16, [N, D], gl.NVMMASharedLayout.get_default_for([N, D], gl.bfloat16),
                                        gl.load(q_ptr + r[:, None] * D + dd[None, :], mask=r[:, None] < R))
        fence_async_shared()
        s = warpgroup_mma(k_s, q_s.permute((1, 0)), gl.zeros([BN, N], gl.float32, layout=mn_l), use_acc=False,
                          is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        p = gl.exp2(s - gl.max(s, axis=0)[None, :])  # a query's maximum over M: across the four warps
        p_s = gl.allocate_shared_memory(gl.bfloat16, [BN, N], gl.NVMMASharedLayout.get_default_for([BN, N], gl.bfloat16))
        p_s.store(p.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        o = warpgroup_mma(v_s.permute((1, 0)), p_s, gl.zeros([D, N], gl.float32, layout=mn_l), use_acc=False,
                          is_async=True)
        o = warpgroup_mma_wait(num_outstanding=0, deps=(o, ))
        rows = ROW0 + gl.arange(0, N, layout=gl.SliceLayout(0, mn_l))
        dims = gl.arange(0, D, layout=gl.SliceLayout(1, mn_l))
        gl.store(o_ptr + rows[None, :] * D + dims[:, None], o, mask=rows[None, :] < R)
        l = gl.sum(p, axis=0)
        lrow = ROW0 + gl.arange(0, N, layout=l.type.layout)
        gl.store(o_ptr + R * D + lrow, l, mask=lrow < R)

    @gluon.jit
    def probe(q_ptr, k_ptr, v_ptr, o_ptr, R: gl.constexpr, NA: gl.constexpr, NB: gl.constexpr):
        """One 64-key tile for rows 0 .. NA - 1 and NA .. NA + NB - 1, two N pieces (NB = 0: one)."""
        ld: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        dd = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
        rk = gl.arange(0, BN, layout=gl.SliceLayout(1, ld))
        sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, D], gl.bfloat16)
        k_s = gl.allocate_shared_memory(gl.bfloat16, [BN, D], sl, gl.load(k_ptr + rk[:, None] * D + dd[None, :]))
        v_s = gl.allocate_shared_memory(gl.bfloat16, [BN, D], sl, gl.load(v_ptr + rk[:, None] * D + dd[None, :]))
        _piece(q_ptr, k_s, v_s, o_ptr, 0, NA, R)
        if NB > 0:
            _piece(q_ptr, k_s, v_s, o_ptr, NA, NB, R)


def compile_probe(rows: int, one: bool = False) -> dict:
    """The probe at ``rows`` compiled for sm_90a: its N pieces, shared memory, PTX wgmma shapes and SASS opcode
    counts (raises triton's compile error where Gluon refuses the shape)."""
    na, nb = pieces(rows, one)
    sig = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*fp32", "R": "constexpr",
           "NA": "constexpr", "NB": "constexpr"}
    src = GluonASTSource(probe, sig, {(4, ): rows, (5, ): na, (6, ): nb},
                         {(i, ): [["tt.divisibility", 16]] for i in range(4)})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    sass = sass_of(k.asm["cubin"])
    ops = collections.Counter(opcode(m.group(2)) for m in map(INSTR.match, sass.splitlines()) if m)
    shapes = sorted({w for line in k.asm["ptx"].splitlines() for w in line.split() if w.startswith("wgmma.mma_async")})
    return {"pieces": (na, nb), "shared": k.metadata.shared, "wgmma": shapes, "ops": ops}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=96)
    ap.add_argument("--one", action="store_true", help="the rows as one N tile (refused unless a power of two)")
    args = ap.parse_args()
    got = compile_probe(args.rows, args.one)
    print(f"rows {args.rows} as N pieces {got['pieces']}: {got['shared']} bytes of shared memory")
    for w in got["wgmma"]:
        print(" ", w)
    print(sum(got["ops"].values()), "SASS instructions;", ", ".join(f"{a} {b}" for a, b in got["ops"].most_common(14)))


if __name__ == "__main__":
    main()
