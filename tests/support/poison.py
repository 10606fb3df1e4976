"""Poisoned allocation for kernel tests: memory a kernel leaves unwritten reads as NaN."""

import torch


def poison_torch_empty(monkeypatch) -> None:
    """For the rest of the test, ``torch.empty``/``torch.empty_like`` return NaN-filled
    floating-point tensors (integer tensors are left as allocated)."""
    real_empty, real_like = torch.empty, torch.empty_like

    def empty(*a, **k):
        t = real_empty(*a, **k)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    def empty_like(*a, **k):
        t = real_like(*a, **k)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch, "empty_like", empty_like)
