"""Stand-in path alias (amukkara/TensorRT-LLM @ d70a2287 imports RotaryEmbedding from here)."""

from ..modules.rotary_embedding import RopeParams, RotaryEmbedding  # noqa: F401
