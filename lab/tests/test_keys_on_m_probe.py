"""lab/keys_on_m_probe.py: the rows' split into power-of-two N pieces (CPU), and the probe compiled for sm_90a where
triton 3.6's Gluon is installed (wgmma N = 64 and 32 for 96 rows; one N = 96 tile refused)."""

import pytest

import keys_on_m_probe as probe
from draftsmith.lowering import gluon_window_block as gwb


@pytest.mark.parametrize("rows, want", [(96, (64, 32)), (112, (64, 64)), (28, (16, 16)), (64, (64, 0)),
                                        (100, (64, 64)), (17, (16, 1))])
def test_pieces_cover_the_rows_in_powers_of_two(rows, want):
    na, nb = probe.pieces(rows, False)
    assert (na, nb) == want
    assert na + nb >= rows and na & (na - 1) == 0 and (nb == 0 or nb & (nb - 1) == 0)


def test_one_piece_is_asked_for_as_is():
    assert probe.pieces(96, True) == (96, 0)


needs_gluon = pytest.mark.skipif(not gwb.available(), reason="needs Gluon's Hopper API (triton 3.6)")


@needs_gluon
def test_96_rows_compile_as_n64_and_n32_pieces():
    got = probe.compile_probe(96)
    assert got["pieces"] == (64, 32)
    assert {w.split(".")[4] for w in got["wgmma"]} == {"m64n64k16", "m64n32k16"}
    assert got["ops"]["HGMMA"] == 32  # S^T: 8 + 8 (K = 128 in steps of 16); O^T: 2 M tiles x 4 steps x 2 pieces


@needs_gluon
def test_one_96_row_tile_is_refused():
    with pytest.raises(Exception) as refused:
        probe.compile_probe(96, one=True)
    root = refused.value
    while root.__cause__ is not None:  # triton wraps the refusal once per jit function it passes through
        root = root.__cause__
    assert "power of 2" in str(root)
