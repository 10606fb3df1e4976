"""Stand-in of ``tensorrt_llm._torch.models.modeling_speculative`` (drafter construction)."""

from ..model_config import ModelConfig
from .modeling_utils import get_registered_draft_model_builder


def external_drafter_config_kwargs(model_config, spec_config) -> dict:
    """Reproduces NVIDIA/TensorRT-LLM, modeling_speculative.py (index id 57359121401),
    ``external_drafter_config_kwargs``: ``trust_remote_code=True``, the target's backends,
    ``spec_config=None``, the target's ``mapping`` (``mapping=model_config.mapping``, issue 35) -- and no
    ``checkpoint_format``."""
    return dict(trust_remote_code=True, attn_backend=model_config.attn_backend, spec_config=None,
                max_num_tokens=model_config.max_num_tokens, mapping=model_config.mapping)


def build_draft_config(model_config):
    """Reproduces ``SpecDecOneEngineForCausalLM.__init__`` (same file), external-drafter branch:
    ``ModelConfig.from_pretrained(spec_config.speculative_model, **external_drafter_config_kwargs)``."""
    return ModelConfig.from_pretrained(model_config.spec_config.speculative_model,
                                       **external_drafter_config_kwargs(model_config, model_config.spec_config))


def get_draft_model(model_config, draft_config, lm_head, model):
    """Reproduces ``get_draft_model`` (same file): the builder registered for the mode."""
    builder = get_registered_draft_model_builder(model_config.spec_config.spec_dec_mode)
    if builder is None:
        raise NotImplementedError(f"get_draft_model does not support mode {model_config.spec_config.spec_dec_mode}")
    return builder(model_config, draft_config, lm_head, model)
