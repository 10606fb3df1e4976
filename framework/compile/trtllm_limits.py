"""What TensorRT-LLM cannot serve, read off a compiled drafter: the one place for it, as
problem lines (every caller asks here).

``trtllm_problems(resolved)`` lists, one line each, the drafter features the emitted
TensorRT-LLM package has no counterpart for: ``emit`` refuses such a drafter in one line
instead of emitting a package that drafts other numbers, and ``inspect`` / ``convert`` warn
up front (:func:`trtllm_warning`; the reference host runs the drafter). :func:`norm_problem`:
a norm TensorRT-LLM applies plainly (:data:`PLAIN_NORMS`) stored Gemma-style, which ``emit``
refuses and ``init`` folds. :func:`worker_mask_problems` and :func:`builtin_math_differences`:
what TensorRT-LLM's built-in drafter classes (built in its worker processes) resolve or compute
differently, which ``emit`` warns of. :func:`trtllm_notes`: differences under sampling only. Facts: no config key
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


#: The norm kinds TensorRT-LLM applies plainly: ``hidden_norm`` (``nn.RMSNorm``) and the stacked
#: ``k_norm`` of ``precompute_context_kv`` (``modeling_dflash.py`` @ ``d70a2287``); a Gemma norm of
#: these kinds must be stored folded (``1 + w``).
PLAIN_NORMS = ("hidden_norm", "k_norm")


def norm_problem(resolved: ResolvedDrafter) -> Optional[str]:
    """Why TensorRT-LLM would apply a norm of ``resolved`` wrongly (one stored Gemma-style of a
    kind it runs plainly, :data:`PLAIN_NORMS`), or None."""
    gemma = [k for k in PLAIN_NORMS if resolved.norms[k] == "gemma"]
    if not gemma:
        return None
    return (f"{', '.join(gemma)} stored Gemma-style; TensorRT-LLM applies them plainly "
            "(fold them with norm_fold_gemma mode: fold)")


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


def worker_mask_problems(r: ResolvedDrafter) -> list[str]:
    """Layers whose mask TensorRT-LLM's built-in classes cannot resolve from the converted config
    (a worker process builds those; tests/upstream/trtllm/CONTRACT.md R2): causal full layers (only DFlash 2 honours
    ``is_causal``), causal windows next to non-causal ones (one ``use_sliding_window`` flag), and
    any causal window under TensorRT-LLM PR #17935's rule (``causal = self._sliding_layers_causal``,
    false for every non-DFlash-2 drafter). A DFlash 2 drafter whose layers share one causality has
    none: its rendered top-level ``is_causal`` decides every layer there (``_get_attention_mask_args``)."""
    if r.dflash2 is not None and len({m.causal for m in r.masks}) == 1:
        return []
    out = []
    causal_full = [i for i, m in enumerate(r.masks) if m.causal and m.window is None]
    if causal_full:
        out.append(f"layers {causal_full}: causal full attention")
    win = {m.causal for m in r.masks if m.window is not None}
    if len(win) > 1:
        out.append("causal and non-causal windowed layers together")
    causal_windows = [i for i, m in enumerate(r.masks) if m.causal and m.window is not None]
    if causal_windows:
        out.append(f"layers {causal_windows}: causal windows (run non-causally by releases with TensorRT-LLM "
                   "PR #17935)")
    return out


def builtin_math_differences(r: ResolvedDrafter) -> list[str]:
    """What TensorRT-LLM's own drafter class would compute differently from ``r`` besides the masks
    of :func:`worker_mask_problems` (``emit`` prints them on their own lines): it applies neither a DFlash 2
    unary transform nor an ``input_embedding_scale``."""
    out = []
    d2 = r.dflash2
    if d2 is not None:
        u = d2.selector.unary
        if u.multiplier != 1 or u.softcap is not None:
            out.append(f"the DFlash 2 unary transform (output_multiplier {u.multiplier}, final_logit_softcapping "
                       f"{u.softcap})")
        if d2.input_embedding_scale != 1:
            out.append(f"input_embedding_scale {d2.input_embedding_scale}")
    return out
