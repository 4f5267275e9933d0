"""MoE op costs: the fewest bytes each op must move and the FLOPs it must do (see ../roofline.py).

Data-dependent terms (experts touched, local pairs) read ``ids`` after the op ran.
"""
from __future__ import annotations

import torch

from ..roofline import Cost, nbytes


def _local_pairs(sh, ids: torch.Tensor) -> torch.Tensor:
    e = ids.reshape(-1).long()
    return (e >= sh.expert_first) & (e < sh.expert_first + sh.experts)


def router(sh, args) -> Cost:
    """bytes = logits + bias + ids + w; flops ~ rows * E * (sigmoid 4 + bias add 1 + top_k
    selection passes 2 * top_k) + rows * top_k * 3 (normalize, scale)."""
    logits, bias, ids, w = args["logits"], args["bias"], args["ids"], args["w"]
    rows, E = logits.shape
    k = ids.shape[1]
    return Cost(nbytes(logits, bias, ids, w), float(rows * E * (5 + 2 * k) + rows * k * 3))


def experts(sh, args) -> Cost:
    """bytes = ids + x rows with a local pair (latent * 2 each) + for every touched local
    expert its w1, s1, w2, s2 (one expert's slice of each) + y rows of local pairs (latent * 2);
    flops = 2 * local_pairs * latent * (2I + I) (FC1 gate and up, FC2), the SiTU and
    dequantization work not counted."""
    x, ids, w1, s1, w2, s2, y = (args[n] for n in ("x", "ids", "w1", "s1", "w2", "s2", "y"))
    rows, k = ids.shape
    local = _local_pairs(sh, ids)
    n_pairs = int(local.sum())
    touched = int(torch.unique(ids.reshape(-1)[local]).numel())
    rows_used = int(local.reshape(rows, k).any(dim=1).sum())
    per_expert = sum(t[0].numel() * t.element_size() for t in (w1, s1, w2, s2))
    latent, inter = x.shape[1], sh.expert_inter
    row_bytes = latent * x.element_size()
    b = nbytes(ids) + rows_used * row_bytes + touched * per_expert + n_pairs * latent * y.element_size()
    return Cost(float(b), 2.0 * n_pairs * latent * 3 * inter)


def combine(sh, args) -> Cost:
    """bytes = ids + w + y rows of local pairs (latent * 2 each) + out; flops = 2 * local_pairs
    * latent (multiply-add per element)."""
    y, ids, w, out = args["y"], args["ids"], args["w"], args["out"]
    n_pairs = int(_local_pairs(sh, ids).sum())
    latent = out.shape[1]
    return Cost(nbytes(ids, w, out) + n_pairs * latent * y.element_size(), 2.0 * n_pairs * latent)


def norm(sh, args) -> Cost:
    """bytes = x + w + out; flops = 4 * rows * D (square-add, scale, weight)."""
    x, w, out = args["x"], args["w"], args["out"]
    return Cost(nbytes(x, w, out), 4.0 * x.numel())


def situ(sh, args) -> Cost:
    """bytes = gu + out; flops ~ 20 per output element (two tanh, one sigmoid, products; a
    transcendental counted as a few flops)."""
    gu, out = args["gu"], args["out"]
    return Cost(nbytes(gu, out), 20.0 * out.numel())
