"""Stand-in of ``tensorrt_llm._torch.models._arch_index``.

Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/models/_arch_index.py @ 065ff9e9:
``MODEL_ARCH_TO_MODULE`` (architecture -> built-in ``modeling_*`` module) and
``SPEC_MODE_TO_MODULE`` (mode name -> module providing its draft builder), restricted to the
entries this stand-in ships.
"""

MODEL_ARCH_TO_MODULE = {
    "Qwen3ForCausalLM": "modeling_qwen3",
    "LlamaForCausalLM": "modeling_qwen3",
    "MiniMaxM3SparseForCausalLM": "modeling_minimaxm3",  # the key; the class is MiniMaxM3ForCausalLM
}
SPEC_MODE_TO_MODULE = {"DFLASH": "modeling_dflash", "DSPARK": "modeling_dspark"}
BUILTIN_PREFIX = "tensorrt_llm._torch.models."
