"""The protected fp32 torch reference of the dense projections, beside the kernels.

``kernels/k31/reference.py`` states the contract every reference keeps and holds the
primitives families share; ``contracts.py`` names each op's reference. Protected: the
gates judge kernels against it, so no candidate edits it and no kernel imports it (the
scope gate refuses both).
"""
from __future__ import annotations

from ..config import Shapes
from ..reference import BF16


def linear(sh: Shapes, *, x, w):
    """``y = x @ w.T`` with ``w [out, in]``; bf16 result."""
    return {"y": (x.float() @ w.float().t()).to(BF16)}
