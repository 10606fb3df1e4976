"""Stage 5, emit: the TensorRT-LLM custom-model package.

- :mod:`.render`: ``draftsmith emit`` (validates, writes the package: fixed Python from
  :mod:`.fixed`, the data in ``resolved.json``, the snippet, the paste rows);
- :mod:`.names`: the one place that validates every spec- or config-derived value it carries;
- :mod:`.runtime`: what the package runs when TensorRT-LLM imports it (registration);
- :mod:`.trtllm_backbone`: the generated backbone, sharded by the target's mapping;
- :mod:`.forward`: the per-rank block decode through the lowerings;
- :mod:`.binding`: the package's data and the run-time rules on a checkpoint's compiled drafter.

Only :mod:`.runtime` and :mod:`.trtllm_backbone` import ``tensorrt_llm``, and only when called.
"""
