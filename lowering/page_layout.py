"""Paged K/V storage as TMA sees it: which of the two page layouts a pages tensor has, and
its 2-D row view (used by ``triton_window_block`` and ``gluon_window_block``)."""

from __future__ import annotations

from typing import Optional

import torch


def page_layout(pages: torch.Tensor) -> Optional[str]:
    """``"nhd"`` when ``pages [num_pages, P, Hkv, D]`` is contiguous, ``"hnd"`` when it is a
    ``permute(0, 2, 1, 3)`` view of a contiguous ``[num_pages, Hkv, P, D]`` (TensorRT-LLM's
    per-block layout: each head's page is one contiguous run), else None."""
    if pages.is_contiguous():
        return "nhd"
    if pages.permute(0, 2, 1, 3).is_contiguous():
        return "hnd"
    return None


def tma_rows(pages: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """``(rows, (TMA_PAGE, TMA_HEAD, TMA_COL))``: the storage of ``pages [num_pages, P, Hkv, D]``
    as the 2-D tensor that TMA tiles (box ``[keys, D]``) address, a view, and its strides: key
    ``slot`` of page ``pg``, head ``h`` is row ``pg * TMA_PAGE + h * TMA_HEAD + slot`` from column
    ``h * TMA_COL``. ``nhd`` storage is ``[num_pages * P, Hkv * D]``, ``hnd`` storage
    ``[num_pages * Hkv * P, D]``."""
    num, page, hkv, d = pages.shape
    layout = page_layout(pages)
    if layout == "nhd":
        return pages.view(num * page, hkv * d), (page, 0, d)
    if layout == "hnd":
        return pages.permute(0, 2, 1, 3).view(num * hkv * page, d), (hkv * page, page, 0)
    raise ValueError("tma tiles need pages that are contiguous [pages, P, Hkv, D] or a "
                     "permute(0, 2, 1, 3) view of contiguous [pages, Hkv, P, D]")
