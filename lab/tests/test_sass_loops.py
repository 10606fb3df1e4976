"""lab/sass_loops.py: the loop finder on cuobjdump-style text (CPU), and on today's kernel compiled
for sm_90a where triton 3.6's Gluon is installed."""

import pytest

from sass_loops import loops, outside, sass_of

SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x64x16.F32.BF16 R24, R180, gdesc[UR8], RZ, !UPT ;
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, R176, gdesc[UR8], R24 ;
        /*0030*/                   FMUL R2, R2, R3 ;
        /*0040*/              @!P0 FMNMX R3, R24, R25, !PT ;
        /*0050*/               @P1 BRA 0x10 ;
        /*0060*/                   HGMMA.64x64x16.F32.BF16 R24, R180, gdesc[UR8], RZ, !UPT ;
        /*0070*/                   BRA 0x60 ;
        /*0080*/                   BRA 0x0 ;
"""


def test_innermost_loops_with_mmas_and_their_opcodes():
    found = loops(SASS)
    assert [(s, e) for s, e, _ in found] == [(0x10, 0x50)]  # 0x60's loop has one HGMMA; 0x0's holds 0x10's
    ops = found[0][2]
    assert ops == {"HGMMA": 2, "FMUL": 1, "FMNMX": 1, "BRA": 1}
    assert [(s, e) for s, e, _ in loops(SASS, min_mma=1)] == [(0x10, 0x50), (0x60, 0x70)]
    assert outside(SASS, found) == (9, 4)  # 0x00, 0x60, 0x70, 0x80: not in 0x10-0x50


def test_todays_two_consumer_ring_loop_is_found():
    from draftsmith.lowering import gluon_window_block as gwb

    if not gwb.available():
        pytest.skip("needs Gluon's Hopper API (triton 3.6)")
    import gluon_compile

    built = gluon_compile.compile_for_sm90(consumers=2, overlap=True, page=32)
    sass = sass_of(built["cubin"])
    ring = [ops for _, _, ops in loops(sass) if ops["HGMMA"] == 12 and not ops["LDGSTS"]]
    assert ring and all(ops["MUFU"] >= 32 for ops in ring)  # a 64 x 64 tile's exp2s a thread, at least
