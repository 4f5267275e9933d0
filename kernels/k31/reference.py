"""The protected torch reference of the K3.1 decode ops: the contract every reference keeps,
and the primitives more than one family uses. Each op's reference stands beside its kernel, in
``kernels/k31/<family>/reference.py`` (residual, dense, kda, mla, moe, lm_head), as
flash-linear-attention keeps each op's naive version; ``contracts.py`` names each op's.

Contract for every reference function:
* arguments are the op's contract arguments by name (see ``contracts.py``): ``sh`` (the rank's
  :class:`~kernels.k31.config.Shapes`), input tensors, state tensors and static values;
* math is f32 (tensors are upcast on entry); results land in the storage dtype at the op's
  boundary (op outputs in bf16 unless stated, KDA state in its configured dtype, caches in fp8
  with a per-row scale: ``kernels/k31/formats.py``);
* nothing is modified in place: the function returns a dict with every output and the new
  value of every state tensor it writes (for caches: the whole cache, rows appended).

Kernels must agree with these within the per-op tolerances of ``kern.yaml``; the accuracy gate
checks every candidate against them, so no candidate may edit this file or a family's
``reference.py`` (kern.yaml's protected globs), and no kernel may import them (the scope gate).
"""
from __future__ import annotations

import torch

from .config import Shapes

BF16 = torch.bfloat16
F32 = torch.float32


# ------------------------------------------------------------------------------ shared primitives
def rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    x = x.float()
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y if w is None else y * w.float()


def cache_slot(sh: Shapes, pos: torch.Tensor, block_table: torch.Tensor):
    """(owned, page, offset) of each row's new token in this rank's share of the cache."""
    cp, r, page = sh.layout.cp, sh.layout.cp_rank, sh.dims.page_size
    pos = pos.long()
    owned = (pos % cp) == r
    t = pos // cp
    rows = torch.arange(pos.shape[0], device=pos.device)
    pages = block_table.long()[rows, (t // page).clamp(max=block_table.shape[1] - 1)]
    return owned, pages, t % page
