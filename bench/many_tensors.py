"""Plan, report and conversion scale linearly in tensor count, for two checkpoints of N tensors:

* **refused**: a tiny synthetic MiniMax DSpark checkpoint plus one extra shard whose header
  lists N one-element tensors (N = 100 000: a ~7 MB header). Every extra tensor is
  UNEXPECTED: ``inspect`` exits 1 with a report line per tensor, ``convert`` exits 2 with
  200 lines and a count.
* **converting**: a small-dimension MiniMax DSpark checkpoint with about N tensors, all
  expected (layer 0 repeated, rolled, into N/18 layers: MXFP8 linears + scales, norms).
  ``inspect`` exits 0 and ``convert`` writes it.

Prints wall and CPU seconds (CPU: this process, all threads; on a shared machine wall
time also holds other sessions' work) of each command for each N. Before the fixes of
issue 19, ``convert`` of the refused case took > 900 s at N = 100 000 (quadratic
``Plan.problem_lines``), and converting read every tensor through ``safe_open``, which
parses the whole header each time (quadratic: ~10 s at N = 1 800). Converting N = 100 000
then took 25.5 s one tensor at a time, 7.4-7.8 s with small tensors stacked
(framework/convert/batch.py; 2026-11-30, docs/benchmarks.md).

Usage: ``python bench/many_tensors.py [N ...]`` (default: 20000 100000). CI bounds it in
``tests/hostile/test_hostile_bounds.py`` (``test_many_tensor_header_in_seconds``,
``test_many_tensor_checkpoint_converts_in_seconds``). Numbers: docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path


def write_many_tensor_shard(path: Path, n: int, prefix: str = "model.layers.{i}.extra.weight") -> None:
    """A valid safetensors file with ``n`` float32 scalars-of-shape-[1] (header ~70 bytes each)."""
    header, off = {}, 0
    for i in range(n):
        header[prefix.format(i=i)] = {"dtype": "F32", "shape": [1], "data_offsets": [off, off + 4]}
        off += 4
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        f.write(b"\0" * off)


def make_source(root: Path, n: int) -> Path:
    """A tiny synthetic minimax_dspark source with an extra shard of ``n`` tensors."""
    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.convert.synth import synthesize

    src = root / f"src-{n}"
    synthesize(load_adapter("minimax_dspark"), "tiny", src, seed=3)
    index = src / "model.safetensors.index.json"
    if index.exists():  # keep a sharded source consistent: list the extra shard's tensors
        data = json.loads(index.read_text())
        data["weight_map"].update({f"model.layers.{i}.extra.weight": "extra.safetensors" for i in range(n)})
        index.write_text(json.dumps(data))
    write_many_tensor_shard(src / "extra.safetensors", n)
    return src


#: synth.tiny overrides of a small-dimension minimax_dspark (every linear one MXFP8 block wide)
SMALL = {"text_config.hidden_size": 32, "text_config.num_attention_heads": 2, "text_config.num_key_value_heads": 1,
         "text_config.head_dim": 16, "text_config.rotary_dim": 8, "text_config.vocab_size": 64,
         "text_config.dense_intermediate_size": 32, "text_config.dspark_ffn_hidden_size": 32,
         "text_config.dspark_noise_token_id": 60, "text_config.dspark_markov_rank": 4}
LAYER0 = "language_model.model.dspark.layers.0."


def make_converting_source(root: Path, n: int) -> tuple[Path, int]:
    """A minimax_dspark source with about ``n`` tensors, every one expected: a small-dimension
    two-layer synthetic checkpoint whose layer 0 is repeated into ``L`` layers (18 tensors
    each: MXFP8 linears + scales, norms), config.json saying ``L`` layers. Returns (folder,
    tensor count). Built by copying, not by ``synth`` (which is not what this measures)."""
    import torch
    from safetensors.torch import load_file, save_file

    from draftsmith.framework.compile.adapter import load_adapter
    from draftsmith.framework.convert.synth import synthesize

    adapter = load_adapter("minimax_dspark")
    adapter.spec.synth.tiny.update(SMALL)
    src = root / f"conv-{n}"
    synthesize(adapter, "tiny", src, seed=3)
    tensors = load_file(src / "model.safetensors")
    layer0 = {k[len(LAYER0):]: v for k, v in tensors.items() if k.startswith(LAYER0)}
    other = {k: v for k, v in tensors.items() if ".layers." not in k}
    n_layers = max(1, (n - len(other)) // len(layer0))
    out = dict(other)
    for i in range(n_layers):  # layer i: layer 0's rows rolled by i (weights and scales alike)
        for k, v in layer0.items():
            b = v.view(torch.uint8) if v.dim() == 2 else v.reshape(-1, 1).view(torch.uint8)
            out[f"language_model.model.dspark.layers.{i}.{k}"] = b.roll(i, 0).view(v.dtype).reshape(v.shape).clone()
    save_file(out, src / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    tc = cfg["text_config"]
    tc["num_hidden_layers"] = n_layers
    tc["layer_types"] = [tc["layer_types"][0]] * n_layers
    tc["moe_layer_freq"] = [0] * n_layers
    (src / "config.json").write_text(json.dumps(cfg))
    return src, len(out)


def run_cli(args: list[str]) -> tuple[int, float, str, float]:
    """(exit code, wall seconds, stderr, CPU seconds of this process: all its threads)."""
    from draftsmith.framework.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    t, c = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, time.perf_counter() - t, err.getvalue(), time.process_time() - c


def main(argv: list[str]) -> None:
    import platform
    import subprocess

    sizes = [int(a) for a in argv] or [20_000, 100_000]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or "?"
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n in sizes:
            for case in ("refused", "converting"):
                src = make_source(root, n) if case == "refused" else make_converting_source(root, n)[0]
                for cmd in (["inspect", f"source={src}"],
                            ["convert", f"source={src}", f"out={root / f'out-{case}-{n}'}", "progress=false"]):
                    rc, dt, err, cpu = run_cli(cmd + ["adapter=minimax_dspark"])
                    print(f"{case:10s} {cmd[0]:8s} N={n:>7d}  exit {rc}  wall {dt:6.2f} s  cpu {cpu:6.2f} s  "
                          f"({cpu / n * 1e6:.0f} us/tensor)  stderr {len(err.splitlines())} lines", flush=True)
                shutil.rmtree(src)
                shutil.rmtree(root / f"out-{case}-{n}", ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
