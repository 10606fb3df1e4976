"""Shared test helpers (no oracles here: those live in each test file)."""

import copy
import json
from types import SimpleNamespace

import torch

from safetensors.torch import load_file

from draftsmith.framework.compile.adapter import load_adapter
from draftsmith.framework.compile.resolve import resolve
from draftsmith.framework.convert.synth import source_config


def minimax():
    return load_adapter("minimax_dspark")


def minimax_raw(scale="full"):
    return copy.deepcopy(source_config(minimax(), scale))


def emit_refusal(name: str):
    """Why ``draftsmith emit target=trtllm`` refuses adapter ``name``'s tiny synthetic drafter
    (``compile/trtllm_limits.py``), or None: tests of emitted packages skip such adapters."""
    from draftsmith.framework.compile.trtllm_limits import trtllm_problems
    a = load_adapter(name)
    problems = trtllm_problems(resolve(a, source_config(a, "tiny")))
    return "; ".join(problems) or None


def read_checkpoint(d):
    """(config dict, every tensor) of a checkpoint folder, sharded or not."""
    index = d / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    tensors = {}
    for f in files:
        tensors.update(load_file(d / f))
    return json.loads((d / "config.json").read_text()), tensors


def fake_target(embed: torch.Tensor, lm_head: torch.Tensor) -> SimpleNamespace:
    """The tests' one fake target: an HF-causal-LM-shaped object with ``model.embed_tokens``
    (an Embedding over ``embed`` [V, H]) and ``lm_head`` (a bias-free Linear with a copy of
    ``lm_head`` [V, H]) -- what ``load_weights_from_target_model`` borrows."""
    head = torch.nn.Linear(lm_head.shape[1], lm_head.shape[0], bias=False)
    head.weight.data = lm_head.detach().clone()
    return SimpleNamespace(model=SimpleNamespace(embed_tokens=torch.nn.Embedding.from_pretrained(embed)),
                           lm_head=head)


def one_error(capsys) -> str:
    """The one ``error: ...`` line a refused command printed (no traceback anywhere)."""
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in cap.err + cap.out, cap.err
    return err[0]
