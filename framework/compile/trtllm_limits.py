"""What TensorRT-LLM's DFlash/DSpark drafter cannot express, read off a compiled drafter.

``trtllm_problems(resolved)`` lists, one line each, the drafter features the emitted
TensorRT-LLM package has no counterpart for: ``emit`` refuses such a drafter in one line
instead of emitting a package that drafts other numbers, and ``inspect`` / ``convert`` warn
up front (:func:`trtllm_warning`; the reference host runs the drafter). Facts: no config key
of a value scale is read in TensorRT-LLM's ``modeling_dflash.py`` / ``modeling_dspark.py`` as
excerpted from ``amukkara/TensorRT-LLM`` @ ``d70a2287`` (``/work/shared/trtllm_src``); the
attention it builds takes ``v = v_proj(x)`` as it is. The emitted backbone passes only
``dim``/``theta`` to ``RopeParams`` (``emit/trtllm_backbone.py``), so a scaled RoPE would
run unscaled. TensorRT-LLM's DFlash 2 path (same commit: ``DFlash2CandidateSelector``,
``select_candidate_path``; ``speculative/dflash.py`` ``_apply_dflash2_selector``) scores the raw
``lm_head`` logits and reads neither ``output_multiplier``, ``final_logit_softcapping`` nor
``input_embedding_scale``; the emitted package supplies both (its ``select_candidate_path``
transforms the top-k logits, its block decode scales the block embeddings: ``emit/runtime.py``,
``emit/forward.py``), so neither is a problem here. A ``sampled`` chain differs only under
sampling and is a warning (:func:`trtllm_notes`).
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
    if resolved.value_scale != 1.0:
        problems.append(
            f"dflash_config.attention_value_scale {resolved.value_scale}: TensorRT-LLM's DFlash attention has no "
            "value scale (an export folds it into o_proj: `draftsmith convert to=trtllm_dflash`)")
    return problems


def trtllm_notes(resolved: ResolvedDrafter) -> list[str]:
    """One line per way TensorRT-LLM runs ``resolved`` differently only under sampling (``emit``
    prints them as warnings; greedy drafts are unchanged)."""
    d2 = resolved.dflash2
    if d2 is not None and d2.selector.chain == "sampled":
        return ["the DFlash 2 selector's chain is 'sampled'; TensorRT-LLM's walk always chains through the greedy "
                "argmax (speculative/dflash.py _apply_dflash2_selector), so under sampling its drafts differ "
                "(equal at temperature 0; verification stays lossless)"]
    return []


def trtllm_warning(resolved: ResolvedDrafter) -> Optional[str]:
    """The one warning line ``inspect`` and ``convert`` print when ``emit target=trtllm`` would
    refuse ``resolved`` (None when TensorRT-LLM can serve it)."""
    problems = trtllm_problems(resolved)
    if not problems:
        return None
    return ("warning: TensorRT-LLM cannot express this drafter (`draftsmith emit target=trtllm` refuses it; "
            "the reference host runs it): " + "; ".join(problems))
