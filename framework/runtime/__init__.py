"""Drafter hosts: the classes that run a converted drafter, in a closed registry.

``HOSTS["torch"]`` is the PyTorch reference host (:class:`DFlashDraftModel`, paged KV,
every lowering, CUDA graphs). Public names are stable: ``DFlashDraftModel``,
``PagedKVCache``, ``BorrowedTarget``, ``DraftOutput``, ``DraftStepGraph``, ``get_host``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...registry import Registry
from .dflash import DFlashDraftModel, DraftOutput
from .graphs import DraftStepGraph
from .kv_cache import PagedKVCache
from .target import BorrowedTarget


@dataclass(frozen=True)
class HostInfo:
    """A registered host: ``model_cls(resolved: ResolvedDrafter, device, dtype, lowering)`` exposing the
    DFlash drafter interface (see :mod:`draftsmith.framework.runtime.dflash`)."""

    name: str
    model_cls: type
    description: str


HOSTS: Registry[HostInfo] = Registry("host")
HOSTS.register("torch", HostInfo("torch", DFlashDraftModel,
                                 "PyTorch reference host: paged ring KV, any lowering, CUDA graphs"))


def get_host(name: str) -> HostInfo:
    """Look a host up by name; an unknown name lists the known ones."""
    return HOSTS.lookup(name)


__all__ = ["BorrowedTarget", "DFlashDraftModel", "DraftOutput", "DraftStepGraph", "HOSTS", "HostInfo", "PagedKVCache", "get_host"]
