"""The product's Gluon kernel compiled for sm_90 without a GPU, as a launch would build it: its
shared memory, warps and PTX (for ``lab/tests/test_gluon_ptxas.py`` and kernel studies; needs
Gluon's Hopper API, triton 3.6). Imports the product kernel; the product never imports this."""

from __future__ import annotations

from typing import Optional

from draftsmith.lowering import gluon_window_block as gwb

try:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
except Exception:  # noqa: BLE001 - no triton, or one without Gluon
    triton = None


def compile_for_sm90(consumers: int = 2, d: int = 128, causal: bool = False, windowed: bool = True,
                     num_buf: Optional[int] = None, consumer_regs: int = gwb.CONSUMER_REGS,
                     producer_regs: Optional[int] = None, timed: bool = False, overlap: bool = False,
                     page: int = gwb.TILE, pingpong: Optional[bool] = None, num_splits: int = 1,
                     one_page: bool = False, wide: bool = False, kernel=gwb, bblk: int = 16) -> Optional[dict]:
    """Compile without a GPU (checks the kernel against the installed triton) as a launch with
    ``num_splits`` splits would (integers equal to 1 made constants where the launch does);
    returns the kernel's shared memory, warps, PTX and cubin (triton's own ptxas), or None without Gluon. ``kernel``: the
    kernel module (today's, another revision's from ``gluon_ab.kernel_at``, or the phase-timer
    build from ``timed_kernel.load``, the only one ``timed`` applies to). ``one_page``: one
    page of ``page`` tokens a sequence (the VANILLA dense arena; its ring of one page made a
    constant, as a launch specializes it). ``wide``: the wide build (128-key ring tiles,
    ``launch(wide=True)``). ``bblk``: rows of the block's private buffers, in a kernel that takes
    them as ``BBLK`` (``lab/variants/all-in-ring.patch``; its ring slots then follow its
    ``ring_slots`` unless ``num_buf`` is given)."""
    gwb = kernel
    slots_given = num_buf is not None
    if gwb.gluon is None:
        return None
    bn, q_smem, num_buf, lay, sub = (gwb._build(d, page, gwb.gl.bfloat16, num_buf, one_page, wide) if wide
                                     else gwb._build(d, page, gwb.gl.bfloat16, num_buf, one_page) if one_page
                                     else gwb._build(d, page, gwb.gl.bfloat16, num_buf))
    if pingpong is None:
        pingpong = gwb.default_pingpong(d)
    if producer_regs is None:
        producer_regs = gwb.PRODUCER_REGS
    kargs = (overlap, sub, pingpong, bn, q_smem, 2 * bn) if wide else (overlap, sub, pingpong, bn, q_smem)
    desc = f"tensordesc<bf16[{sub}, {d}],{lay!r}>"
    const = {"NB": num_buf, "CONSUMERS": consumers, "CONSUMER_REGS": consumer_regs, "PRODUCER_REGS": producer_regs,
             "CAUSAL": causal, "WINDOWED": windowed}
    names = gwb._kernel(*kargs).arg_names
    if "BBLK" in names:
        const["BBLK"] = bblk
        if not slots_given:
            const["NB"] = gwb.ring_slots(d, bn, q_smem, consumers, bblk)
    if "TIMED" in names:  # the lab's phase-timer build (timed_kernel.py); the product kernel has no timer
        const["TIMED"] = timed
    elif timed:
        raise ValueError("timed=True: this kernel has no phase timer (pass kernel=timed_kernel.load())")
    if num_splits == 1:
        const["NUM_SPLITS"] = 1  # as a launch specializes it
    if one_page:
        const["R"] = 1
    # The kernel's own parameter list, typed by name: bf16 tensors, float32 outputs, int32
    # tables, the two descriptors, the float scale; every other parameter is an int32.
    typed = {"lse_ptr": "*fp32", "po_ptr": "*fp32", "plse_ptr": "*fp32", "bt_ptr": "*i32", "ctx_ptr": "*i32",
             "timer_ptr": "*i64", "k_desc": desc, "v_desc": desc, "qk_scale": "fp32"}
    sig = {k: "constexpr" if k in const else typed.get(k, "*bf16" if k.endswith("_ptr") else "i32") for k in names}
    # What a launch specializes on: pointers 16-byte aligned (fits() requires it) and integers
    # that are multiples of 16: here the tensors' strides (multiples of the head dim for the
    # contiguous tensors and pool views the benches and tests launch with), not the block
    # table's row stride (its ring length, 65 at the MiniMax shape). Without the strides' hint
    # the output is stored 2 bytes at a time and Q loaded 4 bytes at a time, unlike those launches.
    aligned = {(i, ): [["tt.divisibility", 16]] for i, (k, t) in enumerate(sig.items())
               if t.startswith("*") or (k.startswith("s_") and k != "s_btn")}
    src = GluonASTSource(gwb._kernel(*kargs), sig, {(list(sig).index(k), ): v for k, v in const.items()}, aligned)
    warps = 4 + 4 * consumers
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "maxnreg": min(255, 65536 // (32 * warps)) // 8 * 8})
    return {"shared": k.metadata.shared, "num_warps": k.metadata.num_warps, "ptx": k.asm.get("ptx", ""),
            "cubin": k.asm.get("cubin", b"")}
