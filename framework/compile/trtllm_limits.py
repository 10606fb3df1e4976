"""What TensorRT-LLM's DFlash/DSpark drafter cannot express, read off a compiled drafter.

``trtllm_problems(resolved)`` lists, one line each, the drafter features the emitted
TensorRT-LLM package has no counterpart for: ``emit`` refuses such a drafter in one line
instead of emitting a package that drafts other numbers, and ``inspect`` / ``convert`` warn
up front (:func:`trtllm_warning`; the reference host runs the drafter). Facts: no config key
of a value scale is read in TensorRT-LLM's ``modeling_dflash.py`` / ``modeling_dspark.py`` as
excerpted from ``amukkara/TensorRT-LLM`` @ ``d70a2287`` (``/work/shared/trtllm_src``); the
attention it builds takes ``v = v_proj(x)`` as it is. The emitted backbone passes only
``dim``/``theta`` to ``RopeParams`` (``emit/trtllm_backbone.py``), so a scaled RoPE would
run unscaled. A DFlash 2 drafter (block convolutions, candidate selector) has no emitted path yet
(docs/dflash2-reference.md section 9): the package would draft plain DFlash numbers.
"""

from __future__ import annotations

from typing import Optional

from .resolved import ResolvedDrafter


def rope_problem(resolved: ResolvedDrafter) -> Optional[str]:
    """Why TensorRT-LLM would serve ``resolved`` with the wrong positions, or None."""
    if resolved.rope.type == "default":
        return None
    return (f"rope_type {resolved.rope.type!r} (RoPE scaling) is not passed to TensorRT-LLM's RopeParams by the "
            "emitted package; the reference host (draftsmith draft) implements it")


def trtllm_problems(resolved: ResolvedDrafter) -> list[str]:
    """One line per feature of ``resolved`` TensorRT-LLM cannot run (empty: none)."""
    problems = [p for p in (rope_problem(resolved),) if p]
    if resolved.dflash2 is not None:
        problems.append("DFlash 2 (block convolutions and candidate selector): the emitted package has no DFlash 2 "
                        "path yet (it would draft without them)")
    if resolved.value_scale != 1.0:
        problems.append(
            f"dflash_config.attention_value_scale {resolved.value_scale}: TensorRT-LLM's DFlash attention has no "
            "value scale (an export folds it into o_proj: `draftsmith convert to=trtllm_dflash`)")
    return problems


def trtllm_warning(resolved: ResolvedDrafter) -> Optional[str]:
    """The one warning line ``inspect`` and ``convert`` print when ``emit target=trtllm`` would
    refuse ``resolved`` (None when TensorRT-LLM can serve it)."""
    problems = trtllm_problems(resolved)
    if not problems:
        return None
    return ("warning: TensorRT-LLM cannot express this drafter (`draftsmith emit target=trtllm` refuses it; "
            "the reference host runs it): " + "; ".join(problems))
