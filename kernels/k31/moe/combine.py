"""moe.combine: ``out[row] = sum over slots j (in order) of w[row, j] * y[row * top_k + j]``, counting
only slots whose expert is local to this rank (``expert_first <= id < expert_first + experts``).

Shapes: ``y [rows * top_k, latent]`` bf16 (pair-indexed; rows of pairs routed to other ranks
hold undefined data, possibly NaN), ``ids [rows, top_k]`` int32, ``w [rows, top_k]`` f32,
``out [rows, latent]`` bf16.

Design: grid ``(rows, cdiv(latent, block_d))``. A program walks the row's slots in order,
accumulating ``w * y`` in f32 over ``block_d`` columns. A non-local slot's y row is never loaded
(masked load with other=0) and its weight is zeroed, so garbage there cannot leak into out.
Memory-bound: each local pair's y row is read once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import tunables
from ..platform import INTERPRET, cdiv


@triton.jit
def _rounded(x, dtype: tl.constexpr, RNE: tl.constexpr):
    """``x`` (f32) cast to ``dtype``. With ``RNE`` (set under the interpreter only) an f32 -> bf16
    cast rounds to nearest even by hand: triton 3.9's interpreter truncates, which would bias
    every bf16 result by up to an ulp. On a GPU the plain cast already rounds to nearest even."""
    if RNE and dtype == tl.bfloat16:
        u = x.to(tl.uint32, bitcast=True)
        u = u + 0x7FFF + ((u >> 16) & 1)
        x = ((u >> 16) << 16).to(tl.float32, bitcast=True)  # exact in bf16: the cast keeps it
    return x.to(dtype)


@triton.jit
def _combine_kernel(y_ptr, y_rs, ids_ptr, ids_rs, w_ptr, w_rs, out_ptr, out_rs,
                    latent, expert_first, n_local,
                    TOP_K: tl.constexpr, BLOCK_D: tl.constexpr, RNE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    ok = d < latent
    acc = tl.zeros([BLOCK_D], tl.float32)
    for j in tl.static_range(TOP_K):
        # the slot's id broadcast over the columns (a vector mask: the interpreter rejects
        # some scalar & vector mask mixes)
        eid = tl.zeros([BLOCK_D], tl.int32) + tl.load(ids_ptr + row * ids_rs + j)
        local = (eid >= expert_first) & (eid < expert_first + n_local)
        wt = tl.where(local, tl.load(w_ptr + row * w_rs + j).to(tl.float32), 0.0)
        yv = tl.load(y_ptr + (row * TOP_K + j) * y_rs + d, mask=ok & local, other=0.0)
        acc += wt * yv.to(tl.float32)
    tl.store(out_ptr + row * out_rs + d, _rounded(acc, out_ptr.dtype.element_ty, RNE), mask=ok)


def moe_combine(sh, *, y: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    rows, top_k = ids.shape
    latent = out.shape[1]
    assert y.shape == (rows * top_k, latent) and w.shape == (rows, top_k)
    assert y.stride(1) == 1 and out.stride(1) == 1 and ids.stride(1) == 1 and w.stride(1) == 1
    if rows == 0:
        return
    block_d = min(tunables.get("moe.combine.block_d"), triton.next_power_of_2(latent))
    _combine_kernel[(rows, cdiv(latent, block_d))](
        y, y.stride(0), ids, ids.stride(0), w, w.stride(0), out, out.stride(0),
        latent, sh.expert_first, sh.experts, TOP_K=top_k, BLOCK_D=block_d, RNE=INTERPRET,
        num_warps=tunables.get("moe.combine.num_warps"))
