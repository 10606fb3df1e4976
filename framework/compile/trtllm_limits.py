"""What TensorRT-LLM's DFlash/DSpark drafter cannot express, read off a compiled drafter.

``trtllm_problems(resolved)`` lists, one line each, the drafter features TensorRT-LLM's own
drafter code has no counterpart for, so ``emit`` can refuse such a drafter in one line
instead of emitting a package that drafts other numbers. Facts: no config key of a value
scale is read in TensorRT-LLM's ``modeling_dflash.py`` / ``modeling_dspark.py`` as excerpted
from ``amukkara/TensorRT-LLM`` @ ``d70a2287`` (``/work/shared/trtllm_src``); the attention it
builds takes ``v = v_proj(x)`` as it is.
"""

from __future__ import annotations

from .resolved import ResolvedDrafter


def trtllm_problems(resolved: ResolvedDrafter) -> list[str]:
    """One line per feature of ``resolved`` TensorRT-LLM cannot run (empty: none)."""
    problems = []
    if resolved.value_scale != 1.0:
        problems.append(
            f"dflash_config.attention_value_scale {resolved.value_scale}: TensorRT-LLM's DFlash attention has no "
            "value scale (an export folds it into o_proj: `draftsmith convert to=trtllm_dflash`)")
    return problems
