"""Shim: ``_torch/speculative/interface.py``: the loader's ``SpeculativeDecodingMode`` stub (the
members the excerpts name), the one object every excerpt and the registry key on."""
from tensorrt_llm._excerpts import ld

SpeculativeDecodingMode = ld.SpeculativeDecodingMode
