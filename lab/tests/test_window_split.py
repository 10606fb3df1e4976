"""lab/window_split.py (CPU) on gluon_ab outputs written as gluon_ab writes them: times made from
a known cost a program and a cost a 64 keys come back out; mismatched runs are refused."""

import math
import random

import pytest

import window_split


def _run(path, window, costs, hkv=8, splits=None, rounds=2):
    """A gluon_ab output at ``window``: for each batch, each kernel's rounds at
    ``waves * (a + b * window / 64)`` us (a little noise around the middle round)."""
    splits = splits or {}
    lines = [f"shape: dflash2_minimax Hq 48, Hkv {hkv}, D 128, B 16, W {window}, ctx 32768, trtllm pages of 32"]
    for n, kernels in costs.items():
        waves = math.ceil(n * hkv * splits.get(n, 1) / 132)
        summary = []
        for name, (a, b) in kernels.items():
            t = waves * (a + b * window / 64)
            xs = [t] + [t + random.uniform(0.5, 2.0) for _ in range(rounds - 1)]
            for x in xs:
                lines.append(f"batch {n} splits {splits.get(n, 1)} {name}: {x:.1f} us, 4.40 TB/s, oracle err 2.27e-03")
            summary.append(f"{name} {[round(x, 1) for x in xs]}")
        lines.append(f"batch {n}: " + "; ".join(summary))
        lines.append(f"batch {n} FA4 / run: {name} 0.852")
    path.write_text("\n".join(lines) + "\n")


def test_costs_come_back(tmp_path):
    costs = {16: {"lowering/gluon_window_block.py": (14.3, 0.823), "/tmp/v.py": (9.9, 0.749)},
             64: {"lowering/gluon_window_block.py": (10.0, 0.820), "FA4": (8.5, 0.690)}}
    _run(tmp_path / "big.txt", 4096, costs, rounds=1)
    _run(tmp_path / "small.txt", 1024, costs, rounds=1)
    got = {(n, k): (b, a) for n, k, b, a in window_split.split(str(tmp_path / "big.txt"), str(tmp_path / "small.txt"))}
    assert set(got) == {(n, k) for n, ks in costs.items() for k in ks}
    for (n, k), (b, a) in got.items():
        want_a, want_b = costs[n][k]
        assert b == pytest.approx(want_b, abs=0.004) and a == pytest.approx(want_a, abs=0.2), (n, k)


def test_medians_and_cli(tmp_path, capsys):
    costs = {64: {"lowering/gluon_window_block.py": (10.0, 0.820)}}
    _run(tmp_path / "big.txt", 4096, costs, rounds=3)
    _run(tmp_path / "small.txt", 1024, costs, rounds=3)
    assert window_split.main([str(tmp_path / "big.txt"), str(tmp_path / "small.txt")]) == 0
    assert "batch 64 lowering/gluon_window_block.py:" in capsys.readouterr().out


def test_mismatched_runs_are_refused(tmp_path):
    costs = {64: {"k.py": (10.0, 0.8)}}
    _run(tmp_path / "a.txt", 4096, costs)
    _run(tmp_path / "b.txt", 1024, costs, hkv=4)
    _run(tmp_path / "c.txt", 1024, costs, splits={64: 2})
    _run(tmp_path / "d.txt", 1024, costs)
    assert window_split.main([str(tmp_path / "a.txt"), str(tmp_path / "d.txt")]) == 0
    assert window_split.main([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]) == 2  # another kind
    assert window_split.main([str(tmp_path / "d.txt"), str(tmp_path / "a.txt")]) == 2  # windows swapped
    with pytest.raises(ValueError, match="splits differ"):
        window_split.split(str(tmp_path / "a.txt"), str(tmp_path / "c.txt"))
    (tmp_path / "empty.txt").write_text("nothing\n")
    assert window_split.main([str(tmp_path / "a.txt"), str(tmp_path / "empty.txt")]) == 2
