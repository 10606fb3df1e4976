"""Stand-in of ``tensorrt_llm._torch.modules.embedding`` (``Embedding``; see decoder_model.py)."""

from .decoder_model import Embedding  # noqa: F401
