"""Stand-in of the speculative configs of ``tensorrt_llm.llmapi.llm_args``.

NOT verified in the stored source (the class bodies were not found in the index): the
allowed ``attention_backend`` values and the ``dspark_*`` fallbacks are taken from issue 17
and drafter-reference.md section 4 (TensorRT-LLM 1.4.0rc1: ``AUTO|VANILLA|TRTLLM|CUTEDSL``;
unset ``block_size``, ``mask_token_id``, ``target_layer_ids``, ``markov_rank`` fall back to the
drafter config's ``dspark_block_size``, ``dspark_noise_token_id``, ``dspark_target_layer_ids``,
``dspark_markov_rank``). See CONTRACT.md "Unverified".

Read since (NVIDIA/TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py`` @
``0004396720054fd8e205cbf616f21f0b57c6b412``, a commit whose release number is unknown):
``attention_backend: Literal["VANILLA", "TRTLLM"]`` (default ``VANILLA``) on both classes; the
DSpark fallbacks above plus ``markov_head_type`` <- ``dspark_markov_head_type``; no
``block_size`` field on ``DFlashDecodingConfig``. Not adopted here: it cannot be tied to the
pinned release (CONTRACT.md).
"""

from dataclasses import dataclass, field
from typing import Any, List, Optional

from ..pinned import is_old

ATTENTION_BACKENDS = ("VANILLA", "TRTLLM") if is_old() else ("AUTO", "VANILLA", "TRTLLM", "CUTEDSL")
DSPARK_FALLBACKS = {"block_size": "dspark_block_size", "mask_token_id": "dspark_noise_token_id",
                    "target_layer_ids": "dspark_target_layer_ids", "markov_rank": "dspark_markov_rank"}
KNOWN_KEYS = {"decoding_type", "speculative_model", "max_draft_len", "attention_backend", "block_size",
              "mask_token_id", "target_layer_ids", "markov_rank"}


@dataclass
class SpecConfig:
    """``DSparkDecodingConfig`` / ``DFlashDecodingConfig`` (the fields the drafter path reads)."""

    decoding_type: str
    speculative_model: str
    max_draft_len: int
    attention_backend: str = "AUTO"
    block_size: Optional[int] = None
    mask_token_id: Optional[int] = None
    target_layer_ids: Optional[List[int]] = None
    markov_rank: Optional[int] = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_snippet(cls, d: dict) -> "SpecConfig":
        unknown = sorted(set(d) - KNOWN_KEYS)
        if unknown:
            raise ValueError(f"speculative_config: unknown keys {unknown}")
        if d.get("attention_backend", "AUTO") not in ATTENTION_BACKENDS:
            raise ValueError(f"speculative_config.attention_backend={d['attention_backend']!r}: must be one of "
                             f"{list(ATTENTION_BACKENDS)}")
        return cls(**d)

    def resolve_from_drafter(self, drafter_config: Any) -> None:
        """DSpark only: unset fields take the drafter config's top-level ``dspark_*`` keys."""
        if self.decoding_type != "DSpark":
            return
        for f, key in DSPARK_FALLBACKS.items():
            if getattr(self, f) is None:
                setattr(self, f, getattr(drafter_config, key, None))
