"""RoPE inverse frequencies for the MLA kernels (mla.prep rotates the cached key, mla.absorb
the query), as a device table.

The table is computed with the reference's own torch expression (``rope`` of
``mla/reference.py``), so the angle ``pos * inv_freq`` a kernel forms in f32 is bit-identical
to the reference's and only cos / sin can differ (by an f32 ulp). Made once per (device, dim,
theta) on the first, eager call (see ..scratch), so captured calls allocate nothing.
"""
from __future__ import annotations

import torch

from ..scratch import cached


def inv_freq(device: torch.device, d: int, theta: float) -> torch.Tensor:
    """``theta ** (-2i / d)`` for ``i < d // 2``, f32 ``[d // 2]`` on ``device``."""

    def make() -> torch.Tensor:
        half = d // 2
        return theta ** (-(torch.arange(half, device=device, dtype=torch.float32) * 2.0) / d)
    return cached(("mla.rope.inv_freq", str(device), int(d), float(theta)), make)
