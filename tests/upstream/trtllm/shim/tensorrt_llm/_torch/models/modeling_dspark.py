"""Shim: NVIDIA/TensorRT-LLM ``_torch/models/modeling_dspark.py`` @ 008b54fe, the excerpt's objects."""
from tensorrt_llm._excerpts import ds, export

export(globals(), ds, ["_DSPARK_HEAD_WEIGHT_ALIASES", "_DSparkHeadMixin", "GQADSparkForCausalLM",
                       "draft_is_embedded_in_target", "_build_dspark_draft"])
