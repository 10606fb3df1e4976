"""Stand-in of ``tensorrt_llm._torch.models.modeling_dspark`` (standalone GQA flavour only).

In the release the suite plays as too old this module does not exist (the DSpark drafters
lived in modeling_dflash.py before the split): importing it raises ModuleNotFoundError.
"""

from ..pinned_gate import OLD

if OLD:
    raise ModuleNotFoundError("No module named 'tensorrt_llm._torch.models.modeling_dspark'",
                              name="tensorrt_llm._torch.models.modeling_dspark")

from tensorrt_llm.logger import logger  # noqa: E402

from ..pyexecutor.config_utils import is_mla  # noqa: E402
from ..speculative.interface import SpeculativeDecodingMode  # noqa: E402
from .modeling_dflash import DFlashForCausalLM, resolve_dspark_head_config  # noqa: E402
from .modeling_utils import register_draft_model  # noqa: E402

_HEAD_WEIGHT_ALIASES = {
    "markov_w1.weight": ("markov_head.markov_w1.weight", "markov_w1.weight"),
    "markov_w2.weight": ("markov_head.markov_w2.weight", "markov_w2.weight"),
    "confidence_proj.weight": ("confidence_head.proj.weight", "confidence_proj.weight"),
    "confidence_proj.bias": ("confidence_head.proj.bias", "confidence_proj.bias"),
}


class GQADSparkForCausalLM(DFlashForCausalLM):
    """Reproduces NVIDIA/TensorRT-LLM, modeling_dspark.py @ 008b54fe, ``GQADSparkForCausalLM`` =
    ``_DSparkHeadMixin`` + ``DFlashForCausalLM``: ``_init_dspark_heads`` (``shift_label`` through
    ``resolve_dspark_head_config``, **True when declared nowhere**; ``markov_rank``;
    ``markov_head_type`` must be vanilla; a truthy resolved ``causal`` is refused;
    ``use_confidence_head`` only warns) and ``load_weights`` taking the head tensors first."""

    def __init__(self, draft_config, *, dflash_attention_backend: str = "VANILLA"):
        super().__init__(draft_config, dflash_attention_backend=dflash_attention_backend)
        cfg = draft_config.pretrained_config
        sl = resolve_dspark_head_config(cfg, "shift_label")
        self._dspark_shift_label = True if sl is None else bool(sl)
        self._dspark_markov_rank = int(resolve_dspark_head_config(cfg, "markov_rank") or 0)
        mht = str(resolve_dspark_head_config(cfg, "markov_head_type") or "vanilla").lower()
        self._dspark_use_confidence_head = bool(resolve_dspark_head_config(cfg, "use_confidence_head") or False)
        self.markov_w1 = self.markov_w2 = None
        if self._dspark_markov_rank > 0 and mht != "vanilla":
            raise ValueError(f"DSpark drafter declares markov_head_type='{mht}'; only 'vanilla' is supported")
        if resolve_dspark_head_config(cfg, "causal"):
            raise ValueError("DSpark drafter sets causal=true; the block decode only supports the non-causal "
                             "DSpark convention.")
        if self._dspark_use_confidence_head:
            logger.warning("DSpark drafter declares use_confidence_head; confidence-scheduled verification "
                           "is not implemented yet")

    @property
    def has_markov_head(self):
        return self._dspark_markov_rank > 0 and self.markov_w1 is not None

    def load_weights(self, weights, weight_mapper=None, **kwargs):
        heads, consumed = {}, set()
        for canon, aliases in _HEAD_WEIGHT_ALIASES.items():
            for a in aliases:
                if a in weights:
                    heads[canon] = weights[a]
                    consumed.add(a)
                    break
        weights = {k: v for k, v in weights.items() if k not in consumed}
        if self._dspark_markov_rank <= 0 and "markov_w1.weight" in heads:
            raise ValueError("DSpark drafter ships markov_w1/markov_w2 but markov_rank resolved to 0.")
        if self._dspark_markov_rank > 0:
            for k in ("markov_w1.weight", "markov_w2.weight"):
                if k not in heads:
                    raise ValueError(f"DSpark drafter declares markov_rank={self._dspark_markov_rank} but the "
                                     f"checkpoint is missing {k}.")
                if tuple(heads[k].shape) != (self.config.vocab_size, self._dspark_markov_rank):
                    raise ValueError(f"DSpark {k} has shape {tuple(heads[k].shape)}")
            self.markov_w1 = heads["markov_w1.weight"].float()
            self.markov_w2 = heads["markov_w2.weight"].float()
        return super().load_weights(weights, weight_mapper=weight_mapper, **kwargs)


def _build_dspark_draft(model_config, draft_config, lm_head, model):
    """Reproduces modeling_dspark.py @ 008b54fe ``_build_dspark_draft`` for a standalone GQA
    drafter: ``GQADSparkForCausalLM(draft_config, dflash_attention_backend=
    model_config.spec_config.attention_backend)`` (embedded DeepSeek-V4 and MLA not reproduced)."""
    if is_mla(draft_config.pretrained_config):
        raise NotImplementedError("stand-in: MLA DSpark drafter not reproduced")
    return GQADSparkForCausalLM(draft_config, dflash_attention_backend=model_config.spec_config.attention_backend)


_build_dspark_draft = register_draft_model(SpeculativeDecodingMode.DSPARK)(_build_dspark_draft)
