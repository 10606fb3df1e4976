"""Stand-in of ``tensorrt_llm._torch.model_config``."""

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

# Import-time binding, as in the real module: ``from ...config_utils import load_pretrained_config``.
# Replacing ``config_utils.load_pretrained_config`` later does not change the name bound here.
from tensorrt_llm._torch.pyexecutor.config_utils import load_pretrained_config


@dataclass(kw_only=True)
class ModelConfig:
    """Reproduces: amukkara/TensorRT-LLM, tensorrt_llm/_torch/model_config.py @ ad239ce3,
    ``ModelConfig`` (fields the drafter path reads: ``pretrained_config``, ``spec_config``,
    ``attn_backend``, ``extra_attrs``, ``lm_head_gather_output``, ``mapping`` (default ``Mapping()``);
    frozen after ``from_pretrained``).
    """

    pretrained_config: Any = None
    spec_config: Any = None
    mapping: Any = field(default_factory=lambda: __import__("tensorrt_llm.mapping", fromlist=["Mapping"]).Mapping())
    attn_backend: str = "TRTLLM"
    max_num_tokens: int = 8192
    lm_head_gather_output: bool = True
    extra_attrs: Dict = field(default_factory=dict, repr=False)
    _frozen: bool = field(default=False, repr=False)

    def __setattr__(self, key, value):
        if getattr(self, "_frozen", False) and key not in ("_frozen", "extra_attrs", "pretrained_config",
                                                           "quant_config"):
            raise AttributeError(f"Cannot modify ModelConfig.'{key}' - instance is frozen")
        super().__setattr__(key, value)

    @property
    def torch_dtype(self):
        import torch

        return torch.float32  # the stand-in computes in float32 on CPU

    @classmethod
    def from_pretrained(cls, checkpoint_dir: str, trust_remote_code=False, **kwargs):
        """Reproduces ``ModelConfig.from_pretrained`` @ ad239ce3: calls the module-level
        ``load_pretrained_config`` bound at import (no ``checkpoint_format`` from the drafter
        path), then builds and freezes the config."""
        if checkpoint_dir is None:
            raise ValueError("checkpoint_dir is None.")
        pretrained = load_pretrained_config(checkpoint_dir, trust_remote_code=trust_remote_code)
        kwargs.pop("checkpoint_format", None)
        allowed = {"spec_config", "attn_backend", "max_num_tokens", "mapping"}
        cfg = cls(pretrained_config=pretrained, **{k: v for k, v in kwargs.items() if k in allowed})
        cfg._frozen = True
        return cfg
