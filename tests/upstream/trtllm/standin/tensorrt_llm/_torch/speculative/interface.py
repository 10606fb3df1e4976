"""Stand-in of ``tensorrt_llm._torch.speculative.interface``."""

import enum


class SpeculativeDecodingMode(enum.Enum):
    """Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/speculative/interface.py,
    ``SpeculativeDecodingMode`` (the two members the DFlash/DSpark drafters register under, as
    used by modeling_dflash.py @ d70a2287 and modeling_dspark.py @ 008b54fe). The enum body
    itself was not read; only the member names used there are reproduced."""

    DFLASH = "DFLASH"
    DSPARK = "DSPARK"
