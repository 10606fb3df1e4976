"""The Gluon kernel's launched builds, assembled for sm_90a by ptxas without a GPU: no wgmma
serialized, and no more shared memory than an SM90 block may have.

ptxas reports ``C7513`` when non-wgmma instructions define a wgmma's input registers inside a
pipeline stage, and then serializes every wgmma of the kernel. A restructuring of the ring
loop that did this (branch ``wip/edge-mid-ring``) ran 45 % slower on the H200 (batch 64:
234 against 150 us) with outputs still right, so only this message or a timing shows it.
Spills are not asserted: on the H200 a 32-token-page build that spilled ran no slower than one
that did not (lab/log.md#a13).
Runs where Gluon's Hopper API compiles (triton 3.6: the device machine, a local venv with
``triton==3.6.0``); elsewhere it skips, saying so. Marked ``gpu`` so that the device machine's
``-m gpu`` runs include it, though it needs no GPU.
"""

import subprocess
from pathlib import Path

import pytest

from draftsmith.lowering import gluon_window_block as gwb
from gluon_compile import compile_for_sm90


def _ptxas():
    if not gwb.available():
        return None
    import triton.backends.nvidia as nv

    path = Path(nv.__file__).parent / "bin" / "ptxas"
    return path if path.is_file() else None


PTXAS = _ptxas()
SM90_SHARED = 232_448  # the most shared memory a block may opt into on SM90 (H100, H200)

# The builds ``launch`` picks (``default_overlap``, ``default_pingpong``: no turns at head dim 256): one split at head dim 128 (overlap), several
# splits (no overlap), head dims 64 and 256, one consumer (B * G <= 64), TensorRT-LLM's 32-token pages,
# causal without a window, the lab's phase-timer build (timed_kernel.py), and the VANILLA dense arena (a page of any length a
# sequence, one TMA box a tile).
BUILDS = [
    dict(overlap=True),
    dict(overlap=False),
    dict(d=64, overlap=False),
    dict(d=256, overlap=False),
    dict(d=256, overlap=False, page=16),
    dict(consumers=1, overlap=True),
    dict(page=32, overlap=True),
    dict(causal=True, windowed=False, overlap=True),
    dict(timed=True, overlap=True),
    dict(page=32775, one_page=True, overlap=True),  # the VANILLA dense arena (one page a sequence), TP 1-4 rows
    dict(page=32775, one_page=True, consumers=1, overlap=False, num_splits=4),  # TP 8 (56 rows), split
]


@pytest.mark.gpu
@pytest.mark.skipif(PTXAS is None, reason="Gluon's Hopper API (triton 3.6) and its ptxas are not installed here")
@pytest.mark.parametrize("build", BUILDS, ids=lambda b: "-".join(f"{k}={v}" for k, v in b.items()))
def test_launched_builds_assemble_without_serialized_wgmma(build, tmp_path):
    import timed_kernel

    compiled = compile_for_sm90(**build, **(dict(kernel=timed_kernel.load()) if build.get("timed") else {}))
    assert compiled["shared"] <= SM90_SHARED, f"{compiled['shared']} bytes of shared memory: no SM90 launches it"
    ptx = compiled["ptx"]
    src = tmp_path / "kernel.ptx"
    src.write_text(ptx)
    done = subprocess.run([str(PTXAS), "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "kernel.cubin")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "C7513" not in done.stderr, "ptxas serializes the wgmma instructions:\n" + done.stderr[-2000:]
