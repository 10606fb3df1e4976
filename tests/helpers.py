"""Shared test helpers (no oracles here: those live in each test file)."""

import copy
import json

from safetensors.torch import load_file

from draftsmith.framework.compile.engine import load_adapter
from draftsmith.framework.convert.synth import source_config


def minimax():
    return load_adapter("minimax_dspark")


def minimax_raw(scale="full"):
    return copy.deepcopy(source_config(minimax(), scale))


def read_checkpoint(d):
    """(config dict, every tensor) of a checkpoint folder, sharded or not."""
    index = d / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    tensors = {}
    for f in files:
        tensors.update(load_file(d / f))
    return json.loads((d / "config.json").read_text()), tensors
