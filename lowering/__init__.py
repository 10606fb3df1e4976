"""Attention lowerings: interchangeable implementations of a drafter layer's block attention.

``base`` holds the contract (:class:`MaskSpec`, :class:`PagedKV`) and the registry; ``table``
registers the built-in lowerings as data, each naming the module of its kernel, imported on
first use (importing this package imports neither torch nor triton).
"""

from .base import LOWERINGS, LoweringInfo, MaskSpec, PagedKV, get_lowering, register_lowering
from . import table  # noqa: F401,E402  (registers the built-in lowerings)

__all__ = ["LOWERINGS", "LoweringInfo", "MaskSpec", "PagedKV", "get_lowering", "register_lowering"]
