"""Shim: amukkara/TensorRT-LLM ``_torch/speculative/dflash.py`` @ d70a2287 (and NVIDIA
``speculative/dspark.py`` ``DSparkWorker._draft_block_width``): the excerpt's objects. The worker's
call sequence is not excerpted (the stand-in ``standin/.../speculative/dflash.py`` transcribes it)."""
from tensorrt_llm._excerpts import export, wk

export(globals(), wk, ["_PAGED_ATTENTION_BACKENDS", "compute_dflash_ctx_buffer_bytes",
                       "validate_dflash_ctx_buffer_budget", "dflash_draft_slot_ids", "DFlashWorker", "DSparkWorker"])
