"""Determinism: converted bytes are identical across runs, torch thread counts
(``threads=N``, wired to ``torch.set_num_threads``), interpreters and hash seeds; and
``synth`` is a pure function of its seed."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from draftsmith.framework.cli.main import main
from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.convert.synth import synthesize
from support.reliability_log import record

SEED = int.from_bytes(os.urandom(4), "little")

# big enough that torch splits the elementwise kernels across threads (> 32k elements)
BIG = ("name: big_dspark\nextends: minimax_dspark\nsynth:\n  tiny:\n"
       "    text_config.hidden_size: 384\n    text_config.num_attention_heads: 6\n"
       "    text_config.vocab_size: 2048\n    text_config.dense_intermediate_size: 1536\n"
       "    text_config.dspark_ffn_hidden_size: 1536\n")


def digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    base = tmp_path_factory.mktemp("det")
    ad = base / "adapters"
    ad.mkdir()
    (ad / "big_dspark.yaml").write_text(BIG)
    src = base / "src"
    synthesize(load_adapter("big_dspark", adapter_dir=ad), "tiny", src, seed=SEED)
    return base, ad, src


def convert(ad: Path, src: Path, out: Path, *extra: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(["convert", "adapter=big_dspark", f"adapter_dir={ad}", f"source={src}", f"out={out}", *extra])
    assert rc == 0, err.getvalue()


def test_threads_and_processes(big):
    base, ad, src = big
    rng = random.Random(SEED)
    before = torch.get_num_threads()
    try:
        # two fresh interpreters with different hash seeds and thread counts, run concurrently
        procs = []
        for i, threads in enumerate((1, 2)):
            env = dict(os.environ, PYTHONHASHSEED=str(rng.randrange(1, 2**31)))
            env.pop("DRAFTSMITH_TEST_KILL_AT", None)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "draftsmith", "convert", "adapter=big_dspark", f"adapter_dir={ad}",
                 f"source={src}", f"out={base / f'proc{i}'}", f"threads={threads}"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        convert(ad, src, base / "t1", "threads=1")
        assert torch.get_num_threads() == 1
        convert(ad, src, base / "t2", "threads=2")
        assert torch.get_num_threads() == 2
        convert(ad, src, base / "t2b", "threads=2")
        for p in procs:
            assert p.wait(timeout=120) == 0, p.stderr.read()
    finally:
        torch.set_num_threads(before)
    ref = digest(base / "t1")
    assert any(k.endswith(".safetensors") for k in ref) and "config.json" in ref
    for name in ("t2", "t2b", "proc0", "proc1"):
        assert digest(base / name) == ref, f"seed {SEED}: {name} differs from threads=1"
    record("determinism", "same checkpoint converted 5 ways (threads 1/2, repeated, 2 interpreters with random hash seeds)",
           "byte-identical")


def test_synth_is_a_function_of_its_seed(tmp_path):
    a = load_adapter("minimax_dspark")
    s = random.Random(SEED).randrange(2**31)
    synthesize(a, "tiny", tmp_path / "a", seed=s)
    synthesize(a, "tiny", tmp_path / "b", seed=s)
    synthesize(a, "tiny", tmp_path / "c", seed=s + 1)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert digest(tmp_path / "a")["model.safetensors"] != digest(tmp_path / "c")["model.safetensors"]
    for n in "ac":
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["convert", "adapter=minimax_dspark", f"source={tmp_path / n}", f"out={tmp_path / (n + 'o')}"]) == 0
    # different sources convert to different bytes (the comparisons above can fail)
    assert digest(tmp_path / "ao") != digest(tmp_path / "co")
    record("determinism", "synth twice with one seed, once with another", "identical / different as expected")


@pytest.mark.parametrize("bad", ["0", "-2", "abc", "1.5", "true"])
def test_threads_must_be_positive_int(bad, tmp_path):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(["synth", "adapter=minimax_dspark", f"out={tmp_path / 's'}", f"threads={bad}"])
    assert rc == 2 and f"threads={bad}" in err.getvalue() and not (tmp_path / "s").exists(), err.getvalue()
    record("determinism", "bad threads= value", "exit 2")
