"""The ``speculative_config`` snippet's fields and their one check (torch-free: ``emit``
writes the snippet with it, ``docs`` validates its serving snippets with it).

A ``docs.serving`` key must be a field of TensorRT-LLM's decoding config for the drafter's
decoding type; a derived key may only restate the derived value (:func:`serving_keys`).
"""

from __future__ import annotations

from typing import Optional

from ..compile.decoding import decoding_type
from ..compile.resolved import ResolvedDrafter
from ..errors import UserError

#: attention_backend the snippet names: VANILLA, the one TensorRT-LLM builds every drafter with on every GPU
#: (modeling_dflash.py @ amukkara d70a2287, DFlashForCausalLM: check_valid_attention_backend refuses TRTLLM
#: without trtllm-gen, SM100/SM103 only; validate_block_attention_windows refuses it for non-causal windows).
SNIPPET_ATTENTION_BACKEND = "VANILLA"
#: The fields of TensorRT-LLM's decoding configs (NVIDIA/TensorRT-LLM llm_args.py @ 00043967:
#: DFlashDecodingConfig / DSparkDecodingConfig on DecodingBaseConfig's 1.3.0rc27 fields); the
#: test suite checks these sets against the real pydantic models.
_BASE_FIELDS = ("max_draft_len", "max_total_draft_tokens", "speculative_model", "max_concurrency",
                "draft_len_schedule", "load_format", "acceptance_rate_window_size", "acceptance_rate_threshold",
                "use_rejection_sampling", "allow_advanced_sampling", "advanced_sampling_mode", "enable_penalty")
DECODING_CONFIG_FIELDS = {
    "DFlash": frozenset(_BASE_FIELDS + ("mask_token_id", "target_layer_ids", "decoding_type", "attention_backend")),
    "DSpark": frozenset(_BASE_FIELDS + ("mask_token_id", "target_layer_ids", "block_size", "markov_rank",
                                        "markov_head_type", "decoding_type", "attention_backend")),
}
#: keys derived from the drafter or the emission; ``docs.serving`` may not set them.
DERIVED_KEYS = frozenset({"decoding_type", "speculative_model", "max_draft_len", "max_total_draft_tokens",
                          "mask_token_id", "target_layer_ids", "block_size", "markov_rank", "markov_head_type"})
SPECULATIVE_MODEL_PLACEHOLDER = "/path/to/converted/drafter"


def serving_keys(serving: Optional[dict], derived: dict, dtype: str, where: str) -> dict:
    """The ``docs.serving`` keys the snippet adds: each a field of the decoding config. A key of
    :data:`DERIVED_KEYS` may only restate the derived value (it is not written twice);
    ``speculative_model`` there describes the folder for the docs table and never replaces the
    snippet's (the converted folder or a placeholder). Anything else: one-line UserError."""
    out = {}
    for key, value in (serving or {}).items():
        shown = key if isinstance(key, str) else repr(key)
        if key not in DECODING_CONFIG_FIELDS[dtype]:
            raise UserError(f"{where}: docs.serving key {shown!r} is not a field of TensorRT-LLM's "
                            f"{dtype}DecodingConfig (fields: {', '.join(sorted(DECODING_CONFIG_FIELDS[dtype]))})")
        if key == "speculative_model":
            continue
        if key in DERIVED_KEYS:
            if derived.get(key) != value:
                raise UserError(f"{where}: docs.serving {key} = {value!r} contradicts the derived {derived.get(key)!r}")
            continue
        out[key] = value
    return out


def speculative_config(resolved: ResolvedDrafter, speculative_model: Optional[str] = None,
                       serving: Optional[dict] = None, where: str = "adapter") -> dict:
    """The ``speculative_config`` mapping for ``resolved``: only fields the pinned decoding
    config defines; ``serving``: the adapter's ``docs.serving`` keys (checked)."""
    dtype = decoding_type(resolved)
    cfg = {"decoding_type": dtype, "speculative_model": speculative_model or SPECULATIVE_MODEL_PLACEHOLDER,
           "max_draft_len": resolved.max_draft_len, "mask_token_id": resolved.mask_token_id,
           "target_layer_ids": list(resolved.target_layer_ids), "attention_backend": SNIPPET_ATTENTION_BACKEND}
    if dtype == "DSpark":
        cfg["block_size"] = resolved.block_size
    cfg.update(serving_keys(serving, dict(cfg), dtype, where))
    assert set(cfg) <= DECODING_CONFIG_FIELDS[dtype]
    return cfg
