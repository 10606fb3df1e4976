"""Attention lowerings: interchangeable implementations of a drafter layer's block attention.

``base`` holds the contract (:class:`MaskSpec`, :class:`PagedKV`) and the registry;
each other module registers one lowering on import.
"""

from .base import LOWERINGS, LoweringInfo, MaskSpec, PagedKV, get_lowering, register_lowering

__all__ = ["LOWERINGS", "LoweringInfo", "MaskSpec", "PagedKV", "get_lowering", "register_lowering"]
