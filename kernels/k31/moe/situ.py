"""moe.situ: the SiTU activation ``4 tanh(g/4) sigmoid(g) 25 tanh(u/25)`` of a fused gate|up
projection, for the shared experts (intermediate 768 per rank) and the dense layer-0 MLP (4224).

Shapes: ``gu [rows, 2I]`` (gate | up; may be a strided view, row stride ``gu.stride(0)``, last dim
contiguous) -> ``out [rows, I]`` bf16.

Design: grid ``(rows, cdiv(I, block))`` (under the interpreter one program for the whole batch
and width, see ``platform.FEW_PROGRAMS``); each program loads ``block`` gate and ``block`` up
values of one row, evaluates SiTU in f32 and stores bf16. Memory-bound elementwise.

The SiTU math lives in activation.py, shared with the routed-experts FC1 epilogue (a file no
single op owns, so the gates treat a change to it as touching every op).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import tunables
from ..platform import INTERPRET, cdiv, row_tiles
from ..rounding import rounded
from .activation import situ_f32


@triton.jit
def _situ_kernel(gu_ptr, gu_rs, out_ptr, out_rs, rows, inter,
                 BLOCK: tl.constexpr, BLOCK_R: tl.constexpr, RNE: tl.constexpr):
    """Program (rb, cb): rows ``[rb * BLOCK_R, (rb + 1) * BLOCK_R)`` x columns
    ``[cb * BLOCK, (cb + 1) * BLOCK)``."""
    row = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = (row < rows)[:, None] & (cols < inter)[None, :]
    src = gu_ptr + row[:, None] * gu_rs + cols[None, :]
    g = tl.load(src, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(src + inter, mask=ok, other=0.0).to(tl.float32)
    h = situ_f32(g, u)
    tl.store(out_ptr + row[:, None] * out_rs + cols[None, :], rounded(h, out_ptr.dtype.element_ty, RNE),
             mask=ok)


def moe_situ(sh, *, gu: torch.Tensor, out: torch.Tensor) -> None:
    rows, inter = out.shape
    assert gu.shape == (rows, 2 * inter) and gu.stride(1) == 1 and out.stride(1) == 1
    if rows == 0:
        return
    block_r, block = row_tiles(rows, inter, tunables.get("moe.situ.block"))
    _situ_kernel[(cdiv(rows, block_r), cdiv(inter, block))](
        gu, gu.stride(0), out, out.stride(0), rows, inter, BLOCK=block, BLOCK_R=block_r,
        RNE=INTERPRET, num_warps=tunables.get("moe.situ.num_warps"))
