"""Which of TensorRT-LLM's speculative decoding types serves a compiled drafter."""

from __future__ import annotations

from .resolved import ResolvedDrafter


def decoding_type(r: ResolvedDrafter) -> str:
    """``DFlash`` for a drafter with no DSpark head and no shift (TensorRT-LLM's DFlash reads
    slots ``1..K``), else ``DSpark``."""
    heads = r.heads
    return "DSpark" if (r.sample_from_anchor or heads.markov_rank or heads.confidence) else "DFlash"
