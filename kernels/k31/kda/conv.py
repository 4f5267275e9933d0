"""kda.conv: causal depthwise conv over (window of taps-1 cached tokens, current token) + SiLU,
and the window shifted by one in place (oldest dropped, current token stored last).

Shapes: ``x [rows, C]`` (a strided view of the fused projection: q | k | v, row stride
``x.stride(0)``, last dim contiguous), ``w [C, taps]``, ``window [rows, taps-1, C]`` (state),
``y [rows, C]`` bf16. ``C = 3 * kda_inner``.

Design: grid ``(cdiv(C, block_c), cdiv(rows, rows_per_program))``. A program loads its
``[taps, block_c]`` weight tile once and reuses it for each of its rows; per row it loads the
``[taps, block_c]`` sequence tile (window rows then ``x``), reduces over taps, applies SiLU and
stores ``y``, then stores sequence rows ``1..taps-1`` as the new window rows ``0..taps-2``.
Each program owns its (rows, channels) of the window, so the in-place shift has no
cross-program hazard. Memory-bound: every byte is read or written once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import tunables
from ..platform import INTERPRET, cdiv, next_pow2


@triton.jit
def _rounded(x, dtype: tl.constexpr, RNE: tl.constexpr):
    """``x`` (f32) cast to ``dtype``. With ``RNE`` (set under the interpreter only) an f32 ->
    bf16 cast rounds to nearest even by hand: the interpreter's own cast truncates, which would
    bias every bf16 result by up to an ulp. On a GPU the plain cast already rounds to nearest."""
    if RNE:
        if dtype == tl.bfloat16:
            u = x.to(tl.uint32, bitcast=True)
            u = u + 0x7FFF + ((u >> 16) & 1)
            x = ((u >> 16) << 16).to(tl.float32, bitcast=True)  # exact in bf16: the cast keeps it
    return x.to(dtype)


@triton.jit
def _conv_kernel(x_ptr, x_rs, w_ptr, w_cs, w_ts, win_ptr, win_rs, win_ts, y_ptr, y_rs,
                 rows, C,
                 TAPS: tl.constexpr, TP: tl.constexpr, BLOCK_C: tl.constexpr,
                 ROWS_PER: tl.constexpr, RNE: tl.constexpr):
    cb = tl.program_id(0)
    rb = tl.program_id(1)
    offs_c = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    mc = offs_c < C
    t = tl.arange(0, TP)  # tap index: 0..TAPS-2 from the window, TAPS-1 the current token
    mt = t < TAPS
    w = tl.load(w_ptr + offs_c[None, :] * w_cs + t[:, None] * w_ts,
                mask=mt[:, None] & mc[None, :], other=0.0).to(tl.float32)
    from_win = t < TAPS - 1
    is_x = t == TAPS - 1
    for i in range(ROWS_PER):
        row = rb * ROWS_PER + i
        mrow = mc & ((tl.zeros([BLOCK_C], tl.int32) + row) < rows)  # channel in range, row live
        m2 = mrow[None, :]
        win_row = win_ptr + row * win_rs
        seq = tl.load(win_row + t[:, None] * win_ts + offs_c[None, :],
                      mask=from_win[:, None] & m2, other=0.0).to(tl.float32)
        xv = tl.load(x_ptr + row * x_rs + offs_c, mask=mrow, other=0.0).to(tl.float32)
        seq = tl.where(is_x[:, None], xv[None, :], seq)
        acc = tl.sum(seq * w, axis=0)
        y = acc / (1.0 + tl.exp(-acc))  # SiLU
        tl.store(y_ptr + row * y_rs + offs_c, _rounded(y, y_ptr.dtype.element_ty, RNE), mask=mrow)
        # shift: sequence row t (1..TAPS-1) becomes window row t-1
        shift = (t >= 1) & mt
        tl.store(win_row + (t[:, None] - 1) * win_ts + offs_c[None, :],
                 _rounded(seq, win_ptr.dtype.element_ty, RNE), mask=shift[:, None] & m2)


def kda_conv(sh, *, x: torch.Tensor, w: torch.Tensor, window: torch.Tensor, y: torch.Tensor) -> None:
    rows, C = x.shape
    taps = w.shape[1]
    assert x.stride(1) == 1 and y.stride(1) == 1 and window.stride(2) == 1 and w.shape[0] == C
    assert window.shape == (rows, taps - 1, C), f"kda_conv: window {tuple(window.shape)}"
    if rows == 0:
        return
    block_c = tunables.get("kda.conv.block_c")
    rows_per = tunables.get("kda.conv.rows_per_program")
    grid = (cdiv(C, block_c), cdiv(rows, rows_per))
    win_rs = window.stride(0)
    win_ts = window.stride(1) if taps > 1 else 0
    _conv_kernel[grid](
        x, x.stride(0), w, w.stride(0), w.stride(1), window, win_rs, win_ts, y, y.stride(0),
        rows, C, TAPS=taps, TP=next_pow2(taps), BLOCK_C=block_c, ROWS_PER=rows_per, RNE=INTERPRET,
        num_warps=tunables.get("kda.conv.num_warps"))
