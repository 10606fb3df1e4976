"""Stand-in of ``tensorrt_llm._torch.pyexecutor.config_utils`` (the parts the drafter path reads)."""

import json
from pathlib import Path
from typing import Optional

from ..hf_config import PretrainedConfig


def _is_sliding_attention_layer(layer_type) -> bool:
    """Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/pyexecutor/config_utils.py @ 00679c66 (verbatim in ../shared/trtllm_src/config_utils_excerpt.py; 2c36f34b, cited before, lacks them),
    ``_is_sliding_attention_layer``: "sliding" in the lower-cased layer type name."""
    return "sliding" in getattr(layer_type, "name", str(layer_type)).lower()


def get_layer_attention_window(config, layer_idx: int) -> Optional[int]:
    """Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/pyexecutor/config_utils.py @ 00679c66,
    ``get_layer_attention_window``.

    ``use_sliding_window is False`` -> None. No ``sliding_window`` -> None (ValueError when
    ``use_sliding_window is True``). With ``layer_types`` a non-sliding layer -> None; without,
    layers below an int ``max_window_layers`` -> None. Else the (positive int) window.
    """
    use = getattr(config, "use_sliding_window", None)
    if use is False:
        return None
    window = getattr(config, "sliding_window", None)
    if isinstance(window, (list, tuple)):
        raise NotImplementedError(f"multiple sliding-window sizes: {window}")
    if window is None:
        if use is True:
            raise ValueError("use_sliding_window=True requires a positive integer sliding_window.")
        return None
    types = getattr(config, "layer_types", None)
    if types:
        if not _is_sliding_attention_layer(types[layer_idx % len(types)]):
            return None
    else:
        mwl = getattr(config, "max_window_layers", None)
        if isinstance(mwl, int) and not isinstance(mwl, bool) and layer_idx < mwl:
            return None
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        raise ValueError("Sliding attention requires a positive integer sliding_window.")
    return window


def is_mla(config) -> bool:
    """Reproduces: config_utils.py @ 00679c66, ``is_mla``: kv_lora_rank and qk_rope_head_dim set."""
    return bool(getattr(config, "kv_lora_rank", None) and getattr(config, "qk_rope_head_dim", None))


def load_pretrained_config(model_name_or_path: str, trust_remote_code: bool = False,
                           checkpoint_format: Optional[str] = None, **kwargs) -> PretrainedConfig:
    """Reproduces: config_utils.py @ 00679c66, ``load_pretrained_config``, for a local folder whose
    ``model_type`` has no special branch: the ``config.json`` dict as a PretrainedConfig
    (``AutoConfig.from_pretrained(..., trust_remote_code)``), unchanged. ``checkpoint_format``
    only selects the Mistral loader there; nothing else consults a config-loader registry.
    Not reproduced: the per-model_type branches (Qwen3.5, Kimi, MiniCPM, ...), none of which
    a draftsmith drafter's model_type reaches.
    """
    path = Path(model_name_or_path) / "config.json"
    raw = json.loads(path.read_text())
    return PretrainedConfig.from_dict(raw)
