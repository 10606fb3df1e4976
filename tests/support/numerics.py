"""The suite's one relative error: the largest absolute difference over the largest magnitude of
the expectation, in float64."""

from __future__ import annotations


def rel(got, want) -> float:
    """``max|got - want| / max|want|`` in float64 (tensors of one shape)."""
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()
