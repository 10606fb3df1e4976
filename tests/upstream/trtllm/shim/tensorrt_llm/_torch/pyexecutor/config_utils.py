"""Shim: NVIDIA/TensorRT-LLM ``_torch/pyexecutor/config_utils.py`` @ 00679c66, the excerpt's objects."""
from tensorrt_llm._excerpts import cu, export

export(globals(), cu, ["_is_sliding_attention_layer", "get_layer_attention_window", "is_mla", "LazyConfigDict",
                       "_CONFIG_REGISTRY", "load_pretrained_config"])
