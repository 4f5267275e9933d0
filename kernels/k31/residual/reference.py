"""The protected fp32 torch reference of residual.mix, beside the kernels.

``kernels/k31/reference.py`` states the contract every reference keeps and holds the
primitives families share; ``contracts.py`` names each op's reference. Protected: the
gates judge kernels against it, so no candidate edits it and no kernel imports it (the
scope gate refuses both).
"""
from __future__ import annotations

import torch

from ..config import Shapes
from ..reference import BF16, rms_norm


def residual_mix(sh: Shapes, *, snaps, partial, delta, delta2, sw, norm_w,
                 n_snap: int, use_partial: bool, close_block: bool):
    """Attention-residual mix over block snapshots, then RMSNorm.

    ``partial += delta (+ delta2)``; when ``close_block`` the partial becomes snapshot
    ``n_snap`` (bf16) and restarts at zero. The candidates are the completed snapshots and,
    when ``use_partial`` (and the block was not just closed), the partial. Each candidate ``c``
    scores ``rms_norm(c) . sw``; ``h = sum softmax(scores) c``; ``x = rms_norm(h) * norm_w``.
    """
    eps = sh.dims.eps
    p = partial.float().clone()
    if delta is not None:
        p = p + delta.float()
    if delta2 is not None:
        p = p + delta2.float()
    snaps_new = snaps.clone()
    if close_block:
        snaps_new[n_snap] = p.to(snaps.dtype)
        p = torch.zeros_like(p)
        n_snap = n_snap + 1
        use_partial = False
    cands = [snaps_new[i].float() for i in range(n_snap)]
    if use_partial:
        cands.append(p)
    c = torch.stack(cands)  # [n, rows, H]
    scores = (rms_norm(c, None, eps) * sw.float()).sum(-1)  # [n, rows]
    alpha = torch.softmax(scores, dim=0)
    h = (alpha.unsqueeze(-1) * c).sum(0)
    x = rms_norm(h, norm_w, eps).to(BF16)
    return {"x": x, "partial": p.to(partial.dtype), "snaps": snaps_new}
