"""Attention lowerings: interchangeable implementations of a drafter layer's block attention.

``base`` holds the contract (:class:`MaskSpec`, :class:`PagedKV`) and the registry;
each other module registers one lowering on import.
"""

from .base import LOWERINGS, LoweringInfo, MaskSpec, PagedKV, get_lowering, register_lowering
from . import dense, window_decode_merge, trtllm_gen  # noqa: F401,E402  (register themselves)

try:  # the Triton kernel registers itself when its module (and triton) is present
    from . import triton_window_block  # noqa: F401
except (ImportError, ModuleNotFoundError):
    pass

__all__ = ["LOWERINGS", "LoweringInfo", "MaskSpec", "PagedKV", "get_lowering", "register_lowering"]
