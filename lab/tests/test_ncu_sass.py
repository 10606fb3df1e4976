"""lab/ncu_sass.py on a source page written as Nsight Compute writes it (CPU): the loop is found by
its execution count, cut at its wgmma landmarks, and every sample lands in exactly one phase."""

import csv
import random

import ncu_sass

REASONS = ["stall_barrier", "stall_wait", "stall_long_sb"]
HEADER = ["Address", "Source", ncu_sass.ALL, "Warp Stall Sampling (Not-issued Samples)", "# Samples",
          ncu_sass.EXECUTED] + REASONS + [r + " (Not Issued)" for r in REASONS]
LOOP = ["BAR.SYNC.DEFER_BLOCKING 0x2, 0x80", "SYNCS.PHASECHK.TRANS64.TRYWAIT P3, [UR14], R88",
        "WARPGROUP.ARRIVE", "HGMMA.64x64x16.F32.BF16 R88, R148, gdesc[UR8], RZ, !UPT",
        "HGMMA.64x64x16.F32.BF16 R88, R144, gdesc[UR8], R88, gsb0", "WARPGROUP.ARRIVE",
        "HGMMA.64x128x16.F32.BF16 R24, R152, gdesc[UR8].tnspB, R24, gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x1",
        "FMNMX R203, R88, R89, !PT", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "FFMA R88, R88, UR22, -R203",
        "MUFU.EX2 R88, R88", "FMUL R24, R24, R118", "@P3 BRA 0x7f00"]


def _write(path, samples):
    """A page: 3 prologue instructions run once, then LOOP run 4096 times with ``samples`` each,
    each split between the three reasons at random."""
    rows = [["Kernel Name", "k"], HEADER]
    body = [("IMAD R1, RZ, RZ, 0x1", 1, 3), ("S2R R0, SR_TID.X", 1, 2), ("LDC R1, c[0x0][0x28]", 1, 1)]
    body += [(t, 4096, s) for t, s in zip(LOOP, samples)]
    for i, (text, executed, s) in enumerate(body):
        a = random.randint(0, s)
        b = random.randint(0, s - a)
        split = [a, b, s - a - b]
        rows.append([hex(0x100 + 16 * i), "      " + text, str(s), str(s), str(s), str(executed)]
                    + [str(x) for x in split] + ["0"] * 3)
    with open(path, "w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)


def test_loop_phases_cover_every_sample(tmp_path):
    samples = [random.randint(1, 500) for _ in LOOP]
    _write(tmp_path / "page.csv", samples)
    _, rows = ncu_sass.read(str(tmp_path / "page.csv"))
    body = ncu_sass.hot_loop(rows)
    assert [r["Source"].strip() for r in body] == LOOP
    cut = ncu_sass.phases(body)
    assert cut[0][1] == 0 and cut[-1][2] == len(LOOP)
    assert all(a[2] == b[1] for a, b in zip(cut, cut[1:]))  # contiguous, no instruction twice
    by_name = {name: sum(samples[i:j]) for name, i, j in cut}
    assert by_name["top: waits for the tile, turn"] == samples[0] + samples[1]
    assert by_name["issue: first HGMMA group"] == sum(samples[2:5])
    assert by_name["wait: scores (DEPBAR.LE 1)"] == samples[7]
    assert by_name["softmax"] == samples[8]
    assert by_name["wait: P @ V (DEPBAR.LE 0)"] == samples[9]
    assert by_name["exp2s to the end"] == sum(samples[11:])
    assert sum(by_name.values()) == sum(samples)
    assert [r["Source"].strip() for r in ncu_sass.hot_loop(rows, copy=5)] == LOOP[:5]


def test_cli_prints_phases_in_cycles(tmp_path, capsys):
    samples = [100] * len(LOOP)
    _write(tmp_path / "page.csv", samples)
    assert ncu_sass.main([str(tmp_path / "page.csv"), "--cycles", str(14 * 10)]) == 0
    out = capsys.readouterr().out
    assert "14 instructions, executed 4096 times each, 1400 samples" in out
    assert "    20 cycles" in out  # the top phase: two instructions of 10 cycles each


def test_no_loop_is_refused(tmp_path):
    (tmp_path / "page.csv").write_text('"Kernel Name","k"\n' + ",".join(f'"{h}"' for h in HEADER) + "\n")
    assert ncu_sass.main([str(tmp_path / "page.csv")]) == 2


def test_outside_counts_the_rest(tmp_path, capsys):
    samples = [10] * len(LOOP)
    _write(tmp_path / "page.csv", samples)
    assert ncu_sass.main([str(tmp_path / "page.csv"), "--outside", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "outside the loop: 6 of 146 samples" in out  # the prologue's 3 + 2 + 1
    assert "executed         1 times:     3 instructions" in out


def test_reads_the_compressed_page_ncu_source_writes(tmp_path):
    """``gpu_session.sh ncu-source`` keeps each page xz-compressed; the reader takes it as it is."""
    import lzma

    _write(tmp_path / "page.csv", [random.randint(0, 50) for _ in LOOP])
    (tmp_path / "page.csv.xz").write_bytes(lzma.compress((tmp_path / "page.csv").read_bytes()))
    assert ncu_sass.read(str(tmp_path / "page.csv.xz")) == ncu_sass.read(str(tmp_path / "page.csv"))
