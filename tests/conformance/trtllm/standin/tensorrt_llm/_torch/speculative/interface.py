"""Stand-in of ``tensorrt_llm._torch.speculative.interface``."""

import enum


class SpeculativeDecodingMode(enum.Enum):
    """Reproduces: NVIDIA/TensorRT-LLM, tensorrt_llm/_torch/speculative/interface.py,
    ``SpeculativeDecodingMode`` (the two members the DFlash/DSpark drafters register under, as
    used by modeling_dflash.py @ d70a2287 and modeling_dspark.py @ 008b54fe). The enum body
    itself was not read; only the member names used there are reproduced."""

    DFLASH = "DFLASH"
    DSPARK = "DSPARK"

    @classmethod
    def from_decoding_type(cls, decoding_type: str) -> "SpeculativeDecodingMode":
        """``speculative_config.decoding_type`` -> mode (DFlash -> DFLASH, DSpark -> DSPARK)."""
        table = {"DFlash": cls.DFLASH, "DSpark": cls.DSPARK}
        if decoding_type not in table:
            raise ValueError(f"decoding_type {decoding_type!r}: unknown; known {sorted(table)}")
        return table[decoding_type]
