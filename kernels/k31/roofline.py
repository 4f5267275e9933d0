"""The cost model every op family's ``roofline.py`` uses: the fewest bytes an op must move
through device memory (each input read once, each output written once, state read and
written) and the FLOPs it must do. Protected: the profile's '% of floor' and the planner's
headroom come from these formulas, so candidates may not edit them.

A formula takes ``(sh, args)`` — the rank's shapes and the op's call arguments — and returns a
:class:`Cost`. Where the bytes depend on data (experts touched, context lengths, chosen rows)
the formula reads the argument tensors; call it after the op ran, outside any CUDA graph.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Cost:
    bytes: float
    flops: float

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.bytes + other.bytes, self.flops + other.flops)

    def floor_s(self, bandwidth: float, flop_rate: float) -> float:
        """The lower bound on time: the larger of bytes/bandwidth and flops/rate."""
        return max(self.bytes / bandwidth, self.flops / flop_rate if flop_rate else 0.0)


def nbytes(*tensors) -> float:
    """Bytes of the tensors' logical elements (a strided view counts what it views)."""
    return float(sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)))
