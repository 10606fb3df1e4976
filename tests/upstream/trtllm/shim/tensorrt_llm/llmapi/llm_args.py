"""Shim: ``tensorrt_llm/llmapi/llm_args.py``: the excerpt's ``StrictBaseModel`` (A @ 0ee732af) and
``DFlashDecodingConfig`` / ``DSparkDecodingConfig`` (N @ 00043967); ``DecodingBaseConfig`` is the loader's stub."""
from tensorrt_llm._excerpts import export, la

export(globals(), la, ["StrictBaseModel", "DecodingBaseConfig", "DFlashDecodingConfig", "DSparkDecodingConfig"])
