"""Shared test helpers (no oracles here: those live in each test file)."""

import copy

from draftsmith.framework.engine import load_adapter
from draftsmith.framework.synth import source_config


def minimax():
    return load_adapter("minimax_dspark")


def minimax_raw(scale="full"):
    return copy.deepcopy(source_config(minimax(), scale))
