"""Paged K/V storage as TMA sees it: which of the two page layouts a pages tensor has, and
its 2-D row view (used by ``triton_window_block`` and ``gluon_window_block``).

A pages tensor is ``[num_pages, P, Hkv, D]`` with a contiguous last dim. Its page stride may be
larger than one page: TensorRT-LLM keeps K and V of a block together (``[pages, 2, Hkv, P, D]``,
the DFlash context arena of ``DFlashWorker._lazy_init_ctx_buffers``) and the KV cache manager's
per-layer view (``KVCacheManager.get_buffers(layer, "HND")``) strides over every layer of a
page-major pool, so ``cache[:, 0].transpose(1, 2)`` is a K view whose pages are apart by
``2 * Hkv * P * D`` or ``L * 2 * Hkv * P * D`` elements. Both are addressed in place.
"""

from __future__ import annotations

from typing import Optional

import torch


def page_layout(pages: torch.Tensor) -> Optional[str]:
    """``"nhd"`` when each page of ``pages [num_pages, P, Hkv, D]`` is one contiguous
    ``[P, Hkv, D]`` run, ``"hnd"`` when it is a ``permute(0, 2, 1, 3)`` view of per-page
    contiguous ``[Hkv, P, D]`` runs (TensorRT-LLM's HND block: each head's page is one run);
    pages may sit any whole number of rows apart (at least one page). Else None."""
    num, page, hkv, d = pages.shape
    sp, st, sh, sd = pages.stride()
    if sd != 1:
        return None
    if st == hkv * d and sh == d and _rows_apart(sp, hkv * d, page, num):
        return "nhd"
    if st == d and sh == page * d and _rows_apart(sp, d, hkv * page, num):
        return "hnd"
    return None


def _rows_apart(page_stride: int, row: int, rows_per_page: int, num: int) -> bool:
    """Consecutive pages start a whole number of ``row``-element rows apart and do not overlap."""
    return num <= 1 or (page_stride % row == 0 and page_stride // row >= rows_per_page)


def tma_rows(pages: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """``(rows, (TMA_PAGE, TMA_HEAD, TMA_COL))``: the storage of ``pages [num_pages, P, Hkv, D]``
    as the 2-D tensor that TMA tiles (box ``[keys, D]``) address, a view from the pages' first
    element, and its strides: key ``slot`` of page ``pg``, head ``h`` is row
    ``pg * TMA_PAGE + h * TMA_HEAD + slot`` from column ``h * TMA_COL``. ``nhd`` storage is rows of
    ``Hkv * D``, ``hnd`` storage rows of ``D``; ``TMA_PAGE`` is the page stride in rows (one page
    for a dense pages tensor, more when pages interleave with other data)."""
    num, page, hkv, d = pages.shape
    layout = page_layout(pages)
    if layout is None:
        raise ValueError("tma tiles need pages [pages, P, Hkv, D] whose pages are contiguous [P, Hkv, D] or "
                         "[Hkv, P, D] runs (a permute(0, 2, 1, 3) view), a whole number of rows apart")
    width, rows_per_page = (hkv * d, page) if layout == "nhd" else (d, hkv * page)
    step = pages.stride(0) // width if num > 1 else rows_per_page
    rows = pages.as_strided(((num - 1) * step + rows_per_page, width), (width, 1))
    return rows, ((step, 0, d) if layout == "nhd" else (step, page, 0))
