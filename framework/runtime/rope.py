"""RoPE frequencies of a drafter: ``inv_freq`` and the attention factor for each rope type
(``default``, ``linear``, ``yarn``, ``llama3``), in float64 from the complete scaling
parameters ``compile/rope.py`` read (no defaults here).

Formulas (also in transformers 5.19 ``modeling_rope_utils.py``):

- default: ``inv_freq[i] = theta^(-2i/d)`` for ``i < d/2`` (``d`` the rotary dim).
- linear (position interpolation): ``inv_freq / factor``.
- yarn (Peng et al. 2023, "YaRN", sections 3.2-3.4): with ``s = factor`` and ``L`` the original
  context, the dimension that turns ``r`` times over ``L`` is
  ``dim(r) = d ln(L / (2 pi r)) / (2 ln theta)``; ``low = dim(beta_fast)``,
  ``high = dim(beta_slow)`` (floor / ceil when ``truncate``; clamped to ``[0, d-1]``); the ramp
  ``gamma_i = clamp((i - low) / (high - low), 0, 1)`` blends the interpolated and original
  frequencies ``inv_freq_i = gamma_i * theta_i / s + (1 - gamma_i) * theta_i``; cos and sin are
  multiplied by the attention factor (``0.1 ln s + 1`` unless given).
- llama3 (Meta's Llama 3.1 frequency smoothing): with ``lambda_i = 2 pi / inv_freq_i``,
  ``L`` the original context, ``low_wl = L / low_freq_factor``, ``high_wl = L / high_freq_factor``:
  ``lambda > low_wl``: ``inv / factor``; ``lambda < high_wl``: ``inv``; otherwise
  ``(1 - a) inv / factor + a inv`` with ``a = (L / lambda - low_freq_factor) /
  (high_freq_factor - low_freq_factor)``.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def rope_frequencies(theta: float, rotary_dim: int, rope_type: str,
                     scaling: dict[str, Any]) -> tuple[torch.Tensor, float]:
    """``(inv_freq [rotary_dim / 2] float64, attention_factor)`` (see the module docstring)."""
    d = rotary_dim
    base = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    if rope_type == "default":
        return base, 1.0
    s = float(scaling["factor"])
    if rope_type == "linear":
        return base / s, 1.0
    if rope_type == "yarn":
        L = scaling["original_max_position_embeddings"]

        def dim_of(rotations: float) -> float:
            return d * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        low, high = dim_of(scaling["beta_fast"]), dim_of(scaling["beta_slow"])
        if scaling["truncate"]:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001  # a ramp of width zero (as transformers does)
        gamma = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        return gamma * base / s + (1 - gamma) * base, float(scaling["attention_factor"])
    if rope_type == "llama3":
        L = scaling["original_max_position_embeddings"]
        lo, hi = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        wavelen = 2 * math.pi / base
        a = (L / wavelen - lo) / (hi - lo)
        smoothed = (1 - a) * base / s + a * base
        out = torch.where(wavelen > L / lo, base / s, torch.where(wavelen < L / hi, base, smoothed))
        return out, 1.0
    raise ValueError(f"rope_type {rope_type!r} has no frequencies here")
