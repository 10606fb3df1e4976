"""The suite's one DFlash 2 block-convolution case: fresh random rows and weights for the
convolution, its wrapped sublayer and a second (MLP-side) convolution, drawn in float64 and
cast to ``dtype`` (docs/dflash2-reference.md: ``taps`` kernel rows, ``groups`` groups of
``group_size`` channels, ``h = groups * group_size``)."""

from __future__ import annotations

import torch

F64 = torch.float64


def conv_case(seed: int, nreq: int = 3, block: int = 5, taps: int = 2, groups: int = 4, group_size: int = 3,
              dtype: torch.dtype = F64) -> dict:
    """``x``, ``y`` [nreq * block, h] (the two sides' rows), ``projection`` [2 * taps * groups, h] and
    ``base`` [2, taps, h] (the convolution), ``sub`` [h, h] (a linear sublayer), ``projection_m`` /
    ``base_m`` (a second convolution), with the shape arguments and ``h``."""
    g = torch.Generator().manual_seed(seed)
    h = groups * group_size

    def rnd(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=g, dtype=F64)).to(dtype)

    return dict(x=rnd(nreq * block, h), y=rnd(nreq * block, h), projection=rnd(2 * taps * groups, h, scale=0.3),
                base=rnd(2, taps, h), sub=rnd(h, h, scale=0.4), projection_m=rnd(2 * taps * groups, h, scale=0.3),
                base_m=rnd(2, taps, h), nreq=nreq, block=block, taps=taps, groups=groups, group_size=group_size,
                h=h, dtype=dtype)
