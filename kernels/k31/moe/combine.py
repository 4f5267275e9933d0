"""moe.combine: ``out[row] = sum over slots j (in order) of w[row, j] * y[row * top_k + j]``, counting
only slots whose expert is local to this rank (``expert_first <= id < expert_first + experts``).

Shapes: ``y [rows * top_k, latent]`` bf16 (pair-indexed; rows of pairs routed to other ranks
hold undefined data, possibly NaN), ``ids [rows, top_k]`` int32, ``w [rows, top_k]`` f32,
``out [rows, latent]`` bf16.

Design: grid ``(rows, cdiv(latent, block_d))`` (under the interpreter one program for the whole
batch and width, see ``platform.FEW_PROGRAMS``). A program walks the row's slots in order,
accumulating ``w * y`` in f32 over ``block_d`` columns. A non-local slot's y row is never loaded
(masked load with other=0) and its weight is zeroed, so garbage there cannot leak into out.
Memory-bound: each local pair's y row is read once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import tunables
from ..platform import INTERPRET, cdiv, row_tiles
from ..rounding import rounded


@triton.jit
def _combine_kernel(y_ptr, y_rs, ids_ptr, ids_rs, w_ptr, w_rs, out_ptr, out_rs,
                    rows, latent, expert_first, n_local,
                    TOP_K: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
                    RNE: tl.constexpr):
    """Program (rb, db) sums the slots of rows ``[rb * BLOCK_R, (rb + 1) * BLOCK_R)`` over columns
    ``[db * BLOCK_D, (db + 1) * BLOCK_D)``, tiles ``[BLOCK_R, BLOCK_D]``."""
    row = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    live = row < rows
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    ok = live[:, None] & (d < latent)[None, :]
    acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
    for j in tl.static_range(TOP_K):
        # the slot's id broadcast over the columns (a tile mask: the interpreter rejects some
        # scalar & vector mask mixes)
        eid = tl.zeros([BLOCK_R, BLOCK_D], tl.int32) + tl.load(ids_ptr + row * ids_rs + j, mask=live,
                                                               other=-1)[:, None]
        local = (eid >= expert_first) & (eid < expert_first + n_local)
        wt = tl.load(w_ptr + row * w_rs + j, mask=live, other=0.0).to(tl.float32)[:, None]
        wt = tl.where(local, wt, 0.0)
        yv = tl.load(y_ptr + (row * TOP_K + j)[:, None] * y_rs + d[None, :], mask=ok & local, other=0.0)
        acc += wt * yv.to(tl.float32)
    tl.store(out_ptr + row[:, None] * out_rs + d[None, :], rounded(acc, out_ptr.dtype.element_ty, RNE),
             mask=ok)


def moe_combine(sh, *, y: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    rows, top_k = ids.shape
    latent = out.shape[1]
    assert y.shape == (rows * top_k, latent) and w.shape == (rows, top_k)
    assert y.stride(1) == 1 and out.stride(1) == 1 and ids.stride(1) == 1 and w.stride(1) == 1
    if rows == 0:
        return
    block_r, block_d = row_tiles(rows, latent, tunables.get("moe.combine.block_d"))
    _combine_kernel[(cdiv(rows, block_r), cdiv(latent, block_d))](
        y, y.stride(0), ids, ids.stride(0), w, w.stride(0), out, out.stride(0),
        rows, latent, sh.expert_first, sh.experts, TOP_K=top_k, BLOCK_D=block_d, BLOCK_R=block_r,
        RNE=INTERPRET, num_warps=tunables.get("moe.combine.num_warps"))
