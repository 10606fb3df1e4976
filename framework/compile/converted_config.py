"""The converted ``config.json`` (``docs/converted-format.md``): the flattened config of
:func:`~.resolve.resolve_flat` with what TensorRT-LLM's built-in classes read rendered from the
record (:func:`render_engine_keys`) and the record itself as its ``draftsmith`` section."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .decoding import decoding_type
from .resolve import resolve_flat
from .resolved import ResolvedDrafter

if TYPE_CHECKING:
    from .adapter import Adapter


def compile_config(adapter: Adapter, raw: dict[str, Any],
                   where: str = "config.json") -> tuple[dict[str, Any], ResolvedDrafter]:
    """``(converted config, its record)`` of raw ``config.json`` ``raw``: the record is what
    in-process consumers read; the converted config carries it as its ``draftsmith`` section."""
    flat, resolved = resolve_flat(adapter, raw, where)
    return render_config(flat, resolved), resolved


def flatten(adapter: Adapter, raw: dict[str, Any], where: str = "config.json") -> dict[str, Any]:
    """The converted config alone (see :func:`compile_config`)."""
    return compile_config(adapter, raw, where)[0]


def render_config(flat: dict[str, Any], resolved: ResolvedDrafter) -> dict[str, Any]:
    """The converted config: flattened config ``flat`` (left unchanged) with the keys of
    :func:`render_engine_keys` merged in (sections key by key) and ``resolved`` as its
    ``draftsmith`` section; keys sorted."""
    out = dict(flat)
    for key, value in render_engine_keys(resolved, flat.get("model_type")).items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    out["draftsmith"] = resolved.section()
    return dict(sorted(out.items()))


#: Flattened ``model_type`` -> the one the converted config carries. TensorRT-LLM's
#: ``load_pretrained_config`` (NVIDIA/TensorRT-LLM ``_torch/pyexecutor/config_utils.py`` @ 00679c66)
#: hands a model_type it has no branch for, with no ``auto_map``, to ``AutoConfig``, which raises
#: for ``minimax_m3`` under transformers 5.5.4 (TensorRT-LLM's pin; 5.23/5.24 know only
#: ``minimax_m3_vl*``). ``minimax_m2``'s ``MiniMaxM2Config`` keeps every key of the converted config
#: as written (it adds defaults only) and the math is read from the ``draftsmith`` section alone.
#: ``muse_glimmer_assistant`` (in the installed 5.19, unknown to 5.5.4) is Qwen3-shaped: ``qwen3``.
#: Checked by tests/upstream/trtllm/test_trtllm_p12_loaded_config.py.
TRTLLM_MODEL_TYPES = {"minimax_m3": "minimax_m2", "muse_glimmer_assistant": "qwen3"}


def render_engine_keys(resolved: ResolvedDrafter, model_type: str | None) -> dict[str, Any]:
    """The keys TensorRT-LLM's built-in drafter classes read, rendered from the record alone (and
    the flattened ``model_type``), so a process that never imported the emitted package resolves
    the trained masks and slots (tests/upstream/trtllm/CONTRACT.md R2, R6): ``use_sliding_window``
    (false when a window is non-causal: the window then comes from
    ``dflash_config.use_swa``/``swa_window_size`` as ``(W-1, W-1)``), ``dspark_config.shift_label``
    (= ``sample_from_anchor``), the top-level ``dspark_*`` fallbacks (:func:`dspark_fallbacks`) and
    a ``model_type`` TensorRT-LLM's ``load_pretrained_config`` loads (:data:`TRTLLM_MODEL_TYPES`).
    For a DFlash 2 record also what its DFlash 2 path reads (amukkara/TensorRT-LLM
    ``modeling_dflash.py`` @ d70a2287, ``DFlashForCausalLM.__init__``, ``_get_attention_mask_args``):
    ``dflash_config.{conv_kernel_size, conv_group_size, selector_rank, selector_top_k}`` and a
    top-level ``is_causal``, which wins over the layer-type rule there (the layers' one causality;
    null when they differ: TensorRT-LLM then falls back to the layer-type rule, and emit warns).
    Pure: the caller merges the result into the flattened config (sections key by key)."""
    windows = [m for m in resolved.masks if m.window is not None]
    keys: dict[str, Any] = {
        "model_type": TRTLLM_MODEL_TYPES.get(model_type, model_type),
        "use_sliding_window": bool(windows) and all(m.causal for m in windows),
        "dspark_config": {"shift_label": resolved.sample_from_anchor},
        **dspark_fallbacks(resolved),
    }
    d2 = resolved.dflash2
    if d2 is not None:
        causal = {m.causal for m in resolved.masks}
        keys["is_causal"] = causal.pop() if len(causal) == 1 else None
        keys["dflash_config"] = {"conv_kernel_size": d2.conv.kernel_size, "conv_group_size": d2.conv.group_size,
                                 "selector_rank": d2.selector.rank, "selector_top_k": d2.selector.top_k}
    return keys


def dspark_fallbacks(resolved: ResolvedDrafter) -> dict[str, Any]:
    """The top-level ``dspark_*`` keys ``DSparkDecodingConfig`` falls back to for a field the
    speculative config leaves unset ("If None, read from the draft model config", NVIDIA
    ``tensorrt_llm/llmapi/llm_args.py`` @ ``00043967``), for a drafter served as DSpark
    (:func:`~.decoding.decoding_type`); none for DFlash, whose config has no fallbacks.
    ``resolve_dspark_head_config``'s top-level ``dspark_<key>`` spellings are not written: it
    reads ``dspark_config`` first, which carries every head switch."""
    if decoding_type(resolved) != "DSpark":
        return {}
    return {
        "dspark_block_size": resolved.block_size,
        "dspark_noise_token_id": resolved.mask_token_id,
        "dspark_target_layer_ids": list(resolved.target_layer_ids),
        "dspark_markov_rank": resolved.heads.markov_rank,
        "dspark_markov_head_type": resolved.heads.markov_head_type,
    }
