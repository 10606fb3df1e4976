"""The contract every attention lowering satisfies, and the closed registry of lowerings.

A lowering computes block attention for one drafter layer:

    out[, lse] = lowering(q, cache, k_blk, v_blk, mask, scale, return_lse=False)

Shapes and units (N sequences, B block queries, Hq query heads, Hkv KV heads, D head dim):
- ``q``: ``[N, B, Hq, D]``; block query ``j`` of sequence ``n`` sits at position
  ``C_n + j`` where ``C_n = cache.ctx_lens[n]`` (the context length).
- ``cache``: a :class:`PagedKV` holding the context keys/values (already k-normed and
  roped) at positions ``0..C_n-1``; pages of any size (TensorRT-LLM's VANILLA dense arena is
  one page of ``max_ctx + block`` tokens per slot), each lowering's ``pools`` naming the
  backends whose pools it reads.
- ``k_blk``, ``v_blk``: ``[N, B, Hkv, D]``, the block's own keys/values at ``C_n + j``.
- ``mask``: a :class:`MaskSpec` (section 2 of the drafter reference).
- ``scale``: softmax scale, usually ``1/sqrt(D)``.
- returns ``out`` ``[N, B, Hq, D]`` in ``q.dtype`` and, with ``return_lse``, ``lse``
  ``[N, B, Hq]`` float32, natural log of the softmax denominator (of scaled scores).
Softmax is computed in float32. GQA: query head ``i`` uses KV head ``i // (Hq // Hkv)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Optional, get_args

from ..registry import Registry, load

#: The kinds of device a lowering is chosen for (defined here once; every table keys on it).
DeviceClass = Literal["sm100", "sm90", "cpu"]
DEVICE_CLASSES: tuple[str, ...] = get_args(DeviceClass)


def device_class(device: "torch.device | str | None" = None) -> str:
    """``"cpu"``; ``"sm90"`` for CUDA capability 9.x; ``"sm100"`` for 10.x; else ``"sm{major}{minor}"``.

    ``device=None``: the current CUDA device when there is one, else the CPU.
    """
    import torch

    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cpu":
        return "cpu"
    if device.type != "cuda":
        raise ValueError(f"unsupported device {device}")
    major, minor = torch.cuda.get_device_capability(device)
    if major in (9, 10):
        return f"sm{major}0"
    return f"sm{major}{minor}"


def window_reach(window: Optional[int]) -> Optional[int]:
    """``W - 1``: the farthest distance ``|p - k|`` a window ``W`` lets a query see (the one
    place it is computed); None for full attention (``window=None``)."""
    return None if window is None else window - 1


@dataclass(frozen=True)
class MaskSpec:
    """Which keys a query may see. Query position ``p``, key position ``k``.

    - ``window=None``: full attention; ``causal`` then means ``k <= p``.
    - ``window=W``: causal means ``p-(W-1) <= k <= p``; non-causal means ``|p-k| <= W-1``.
    """

    causal: bool
    window: Optional[int] = None

    def __post_init__(self):
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")

    @property
    def reach(self) -> Optional[int]:
        """``W - 1`` (:func:`window_reach`); None for full attention."""
        return window_reach(self.window)

    @property
    def bounds(self) -> tuple[int, int]:
        """(left, right) in flash-attn ``window_size`` terms; -1 means unbounded."""
        if self.window is None:
            return (-1, 0) if self.causal else (-1, -1)
        w = self.reach
        return (w, 0) if self.causal else (w, w)

    def allowed(self, p: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Boolean mask, broadcasting query positions ``p`` against key positions ``k``."""
        import torch

        ok = torch.ones(torch.broadcast_shapes(p.shape, k.shape), dtype=torch.bool, device=p.device)
        if self.causal:
            ok &= k <= p
        if self.window is not None:
            ok &= (p - k).abs() <= self.reach
        return ok


@dataclass
class PagedKV:
    """Context K/V of one layer in a paged cache with per-sequence ring block tables.

    - ``k_pages``, ``v_pages``: ``[num_pages, page_size, Hkv, D]``, any strides with a contiguous
      last dim; e.g. a ``transpose(1, 2)`` view of TensorRT-LLM's per-block ``[num_pages, Hkv,
      page_size, D]`` storage (``triton_window_block`` loads both layouts by TMA).
    - ``block_table``: ``[N, R]`` int32, the physical pages of each sequence.
    - ``ctx_lens``: ``[N]`` int32, ``C_n``, context tokens written so far.

    Token ``t`` of sequence ``n`` lives at ``k_pages[block_table[n, (t // P) % R], t % P]``
    (``P = page_size``). A sequence's pages form a ring: a windowed layer gets only
    ``R = ceil((W - 1) / P) + 1`` pages, so tokens older than ``(R - 1) * P`` before the
    current page are overwritten (memory O(W)), and the tokens a window-``W`` query at
    ``p >= C_n`` can see are always present. A full-attention layer gets
    ``R >= ceil(C_n / P)`` pages, so nothing wraps. ``oldest(n)`` is the first position
    still stored.

    ``scratch_pages`` (optional) ``[N, S]`` int32: pages of the same pool a lowering may
    overwrite with the block's keys (the engine reserves them, e.g. the sequence's own pages
    past its context); ``trtllm_gen`` needs ``S >= ceil((P - 1 + B) / P)`` of them.
    """

    k_pages: torch.Tensor
    v_pages: torch.Tensor
    block_table: torch.Tensor
    ctx_lens: torch.Tensor
    scratch_pages: Optional[torch.Tensor] = None

    @property
    def page_size(self) -> int:
        return self.k_pages.shape[1]

    @property
    def ring_pages(self) -> int:
        return self.block_table.shape[1]

    def oldest(self, n: int) -> int:
        """First context position of sequence ``n`` that is still stored."""
        c = int(self.ctx_lens[n])
        if c == 0:
            return 0
        p = self.page_size
        last_page_start = ((c - 1) // p) * p
        return max(0, last_page_start - (self.ring_pages - 1) * p)

    def gather(self, n: int, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V ``[end-start, Hkv, D]`` of sequence ``n`` for positions ``start..end-1``.

        Raises ``ValueError`` if a position was already recycled or was never written.
        """
        if start < self.oldest(n) or end > int(self.ctx_lens[n]):
            raise ValueError(
                f"positions {start}..{end - 1} of sequence {n} are not in the cache "
                f"(holds {self.oldest(n)}..{int(self.ctx_lens[n]) - 1})"
            )
        import torch

        t = torch.arange(start, end, device=self.k_pages.device)
        pages = self.block_table[n].long()[(t // self.page_size) % self.ring_pages]
        slots = t % self.page_size
        return self.k_pages[pages, slots], self.v_pages[pages, slots]


LoweringFn = Callable[..., object]


@dataclass(frozen=True)
class LoweringInfo:
    """A registered lowering: where its function lives and what it needs to run.

    The entry is data (no kernel module is imported to register it); ``module`` is a module of
    this package (ours, never a spec's string) imported on first use of :attr:`fn` or
    :meth:`available`.
    """

    name: str
    module: str  # module of this package holding the function, e.g. "dense"
    function: str  # the lowering's function in ``module``
    description: str
    devices: tuple[DeviceClass, ...]  # device classes it may be chosen for
    #: function in ``module`` answering whether it can run in this process (libraries, GPU);
    #: None: always (no import needed to answer)
    availability: Optional[str] = None
    needs_context_kernel: bool = False  # whether it needs the engine's separate context kernel
    head_dims: Optional[tuple[int, ...]] = None  # head dims it supports; None = any
    #: TensorRT-LLM DFlash attention backends whose context pool it reads in place: VANILLA's
    #: dense arena (one page of any length per slot) and the paged HND pool of TRTLLM/FA4/XQA.
    pools: tuple[str, ...] = ("VANILLA", "TRTLLM", "FA4", "XQA")

    @property
    def fn(self) -> LoweringFn:
        """The lowering's function (imports its module on first use)."""
        return load(__package__, f"{self.module}:{self.function}")

    def available(self) -> bool:
        """Whether it can run in this process; False when its module cannot be imported."""
        if self.availability is None:
            return True
        try:
            answer = load(__package__, f"{self.module}:{self.availability}")
        except ImportError:
            return False
        return bool(answer())


LOWERINGS: Registry[LoweringInfo] = Registry("lowering", builtins=__package__)


def register_lowering(info: LoweringInfo) -> LoweringInfo:
    return LOWERINGS.register(info.name, info)


def get_lowering(name: str) -> LoweringInfo:
    """Look a lowering up by name; an unknown name lists the known ones."""
    return LOWERINGS.lookup(name)
