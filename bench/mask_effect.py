"""The mask-effect table: one trained pair served with the mask it was trained with, and wrong.

The tiny pair of ``tests/fixtures/tiny_pair`` (made by ``bench/train_tiny_pair.py``: DSpark
drafter trained with a non-causal window ``W = 32``, rope base ``1e4``) is converted once per
variant with ``adapter=minimax_dspark`` and Hydra overrides of the adapter spec (exactly what
``draftsmith eval ... adapter=minimax_dspark <override>`` does), then evaluated by greedy
speculative decoding on the pair's held-out prompts. Each row also checks that the output
equals the target's own greedy output (the verification step makes it so, whatever the mask).

Usage: ``python bench/mask_effect.py [--pair DIR] [--max-new-tokens 64] [--device cpu]
[--dtype float32] [--threads 1] [--json FILE]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch

from draftsmith.framework.compile.adapter import compile_spec
from draftsmith.framework.convert.execute import convert
from draftsmith.framework.eval import run_eval
from draftsmith.framework.eval.report import report_dict
from draftsmith.framework.spec.loading import load_spec

ROOT = Path(__file__).resolve().parents[1]


def variants(num_layers: int) -> list[tuple[str, str, list[str]]]:
    """(label, what is served, ``adapter.*`` overrides without the ``adapter.`` prefix)."""
    full = ", ".join(f"{i}: {{window: full}}" for i in range(num_layers))
    return [
        ("(a)", "as trained: non-causal window 32", []),
        ("(b)", "causal window 32 (TensorRT-LLM's built-in sliding mask)", ["attention.windowed_causal=true"]),
        ("(c)", "window off by one: 31", ["attention.window=31"]),
        ("(c')", "window off by one: 33", ["attention.window=33"]),
        ("(d)", "full attention, non-causal (no window)", [f"attention.layers={{{full}}}"]),
        ("(e)", "wrong rope base: 1e6 instead of 1e4",
         ["+config.fields.rope_theta={from: [no_such_key], default: 1000000.0}"]),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", type=Path, default=ROOT / "tests" / "fixtures" / "tiny_pair")
    ap.add_argument("--prompts", type=Path, default=None, help="default: PAIR/prompts.jsonl")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    source = args.pair / "dspark"
    n_layers = json.loads((source / "config.json").read_text())["text_config"]["num_hidden_layers"]
    work = Path(tempfile.mkdtemp(prefix="draftsmith-mask-effect-"))
    rows = []
    try:
        for i, (label, what, overrides) in enumerate(variants(n_layers)):
            spec, path = load_spec("minimax_dspark", overrides)
            out = work / f"variant{i}"
            convert(compile_spec(spec, path), source, out, progress=False)
            t0 = time.perf_counter()
            r = run_eval(args.pair / "target", out, args.prompts or args.pair / "prompts.jsonl",
                         max_new_tokens=args.max_new_tokens, device=args.device, dtype=args.dtype, check=True)
            d = report_dict(r)
            d.update(label=label, served=what, overrides=["adapter." + o.lstrip("+") if not o.startswith("+")
                                                          else "+adapter." + o[1:] for o in overrides],
                     seconds=round(time.perf_counter() - t0, 1))
            rows.append(d)
            print(f"{label} {what}: {d['mean_acceptance_length']:.3f} (identical: {d['matches_target']})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    k = rows[0]["max_draft_len"]
    print(f"\n{rows[0]['prompts']} prompts, {args.max_new_tokens} new tokens each, {args.device} {args.dtype}\n")
    print("| | served as | override | mean acceptance length | accepted at draft position 1..%d | output = target greedy |" % k)
    print("|---|---|---|---|---|---|")
    for d in rows:
        pos = " ".join(f"{x:.2f}" for x in d["acceptance_by_position"])
        ov = ", ".join(f"`{o}`" for o in d["overrides"]) or "none"
        print(f"| {d['label']} | {d['served']} | {ov} | **{d['mean_acceptance_length']:.2f}** | {pos} | "
              f"{'yes' if d['matches_target'] else 'NO'} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
