"""lab/wave_fit.py: the streaming rate and fixed cost a wave it fits from attention.py logs are
the ones the synthetic logs were made from (CPU; no GPU needed)."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SHAPE = {"Hq": 64, "Hkv": 4, "D": 128, "B": 7, "ctx": 32768}


def write_log(path, w, sms, kernels, first_wave_extra=3.0, with_sms=True):
    """An attention.py-style log at window ``w``: per kernel ``(TB/s, fixed us a wave)``, times at
    1, 2 and 4 whole waves, computed here from the bytes a wave moves."""
    d, b, g = SHAPE["D"], SHAPE["B"], SHAPE["Hq"] // SHAPE["Hkv"]
    wave = sms * ((w - 1 + b) * d * 4 + 4 * b * g * d)  # bytes: K and V window, q and out, bf16
    head = {"gpu": "synthetic", "shape": dict(SHAPE, W=w)}
    if with_sms:
        head["sms"] = sms
    lines = [json.dumps({"launch_floor_us": 4.7}), json.dumps(head)]
    for name, (tbps, fixed) in kernels.items():
        per_wave = fixed + wave / (tbps * 1e12) * 1e6
        for waves in (1, 2, 4):
            n = waves * sms // SHAPE["Hkv"]
            lines.append(json.dumps({"batch": n, "method": name, "us": first_wave_extra + waves * per_wave}))
            lines.append(json.dumps({"batch": n, "method": name, "kernel_us": 1.0}))  # not a replay time: ignored
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fit_recovers_the_rate_and_fixed_cost(tmp_path):
    import wave_fit

    rng = random.Random()
    kernels = {"ours": (rng.uniform(3.5, 4.5), rng.uniform(2.0, 9.0)), "peer": (rng.uniform(3.5, 4.5), rng.uniform(2.0, 9.0))}
    sms = 132
    logs = [write_log(tmp_path / f"w{w}.jsonl", w, sms, kernels, first_wave_extra=rng.uniform(0, 5)) for w in (2048, 4096, 8192)]
    got = wave_fit.fit(logs)
    for name, (tbps, fixed) in kernels.items():
        assert got[name]["TBps"] == pytest.approx(tbps, rel=1e-9)
        assert got[name]["fixed_us"] == pytest.approx(fixed, rel=1e-9, abs=1e-9)
        assert got[name]["worst_miss_us"] < 1e-6  # the data are the model's own


def test_worst_miss_shows_a_time_off_the_model(tmp_path):
    import wave_fit

    logs = [write_log(tmp_path / f"w{w}.jsonl", w, 132, {"ours": (4.4, 7.0)}) for w in (2048, 4096, 8192)]
    lines = logs[1].read_text().splitlines()
    bumped = []
    for raw in lines:  # one measured time 3 us slower than the model
        rec = json.loads(raw)
        if rec.get("batch") == 66 and "us" in rec:
            rec["us"] += 3.0
        bumped.append(json.dumps(rec))
    logs[1].write_text("\n".join(bumped) + "\n")
    miss = wave_fit.fit(logs)["ours"]["worst_miss_us"]
    assert 0.5 < miss <= 3.0


def test_cli_prints_the_table_and_refuses_bad_logs(tmp_path):
    kernels = {"ours": (4.4, 7.0)}
    logs = [write_log(tmp_path / f"w{w}.jsonl", w, 132, kernels) for w in (2048, 4096)]
    run = subprocess.run([sys.executable, str(ROOT / "lab" / "wave_fit.py"), *map(str, logs)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "| ours | " in run.stdout and "| 4.40 | 7.0 | 0.0 |" in run.stdout

    no_sms = write_log(tmp_path / "nosms.jsonl", 2048, 132, kernels, with_sms=False)
    run = subprocess.run([sys.executable, str(ROOT / "lab" / "wave_fit.py"), str(no_sms), str(logs[1])],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "pass --sms" in run.stderr and "Traceback" not in run.stderr

    run = subprocess.run([sys.executable, str(ROOT / "lab" / "wave_fit.py"), str(logs[0]), str(logs[0])],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "window 2048 is already in another log" in run.stderr

    junk = tmp_path / "junk.jsonl"
    junk.write_text("{not json\n")
    run = subprocess.run([sys.executable, str(ROOT / "lab" / "wave_fit.py"), str(junk)], capture_output=True, text=True)
    assert run.returncode == 2 and "junk.jsonl:1: not a JSON line" in run.stderr
