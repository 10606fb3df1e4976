"""Shim: amukkara/TensorRT-LLM ``_torch/models/modeling_dflash.py`` @ d70a2287, the excerpt's objects
(``DFlashForCausalLM`` is the excerpt's class: its omitted methods are absent)."""
from tensorrt_llm._excerpts import df, export

export(globals(), df, ["dspark_layer_window_size", "_is_dflash2_architecture", "DFlashForCausalLM",
                       "_DSPARK_HEAD_KEY_ALIASES", "resolve_dspark_head_config", "declares_dspark_heads",
                       "_build_dflash_draft"])
