"""kda.conv: causal depthwise conv over (window of taps-1 cached tokens, current token) + SiLU,
and the window shifted by one in place (oldest dropped, current token stored last).

Shapes: ``x [rows, C]`` (a strided view of the fused projection: q | k | v, row stride
``x.stride(0)``, last dim contiguous), ``w [C, taps]``, ``window [rows, taps-1, C]`` (state),
``y [rows, C]`` bf16. ``C = 3 * kda_inner``.

Design: grid ``(cdiv(C, block_c), cdiv(rows, rows_per_program))`` (under the interpreter one
program takes every row and channel at once, see ``platform.FEW_PROGRAMS``). A program loads its
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

from .. import platform, tunables
from ..platform import INTERPRET, cdiv, next_pow2
from ..rounding import rounded


@triton.jit
def _conv_kernel(x_ptr, x_rs, w_ptr, w_cs, w_ts, win_ptr, win_rs, win_ts, y_ptr, y_rs,
                 rows, C,
                 TAPS: tl.constexpr, TP: tl.constexpr, BLOCK_C: tl.constexpr,
                 ROWS_PER: tl.constexpr, BLOCK_R: tl.constexpr, RNE: tl.constexpr):
    """Program (cb, rb) covers channels ``[cb * BLOCK_C, (cb + 1) * BLOCK_C)`` of rows
    ``[rb * ROWS_PER, (rb + 1) * ROWS_PER)``, BLOCK_R rows per loop step (1 on a GPU): tiles
    ``[BLOCK_R, TP, BLOCK_C]`` (row, tap, channel)."""
    cb = tl.program_id(0)
    rb = tl.program_id(1)
    offs_c = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    mc = offs_c < C
    t = tl.arange(0, TP)  # tap index: 0..TAPS-2 from the window, TAPS-1 the current token
    mt = t < TAPS
    w = tl.load(w_ptr + offs_c[None, :] * w_cs + t[:, None] * w_ts,
                mask=mt[:, None] & mc[None, :], other=0.0).to(tl.float32)
    from_win = (t < TAPS - 1)[None, :, None]
    is_x = (t == TAPS - 1)[None, :, None]
    taps = t[None, :, None]
    chans = offs_c[None, None, :]
    for i in range(ROWS_PER // BLOCK_R):
        row = rb * ROWS_PER + i * BLOCK_R + tl.arange(0, BLOCK_R)
        mrow = mc[None, :] & (row < rows)[:, None]  # [BLOCK_R, BLOCK_C]: channel in range, row live
        m3 = mrow[:, None, :]
        win_row = (win_ptr + row * win_rs)[:, None, None]
        seq = tl.load(win_row + taps * win_ts + chans, mask=from_win & m3, other=0.0).to(tl.float32)
        xv = tl.load(x_ptr + row[:, None] * x_rs + offs_c[None, :], mask=mrow, other=0.0).to(tl.float32)
        seq = tl.where(is_x, xv[:, None, :], seq)
        acc = tl.sum(seq * w[None, :, :], axis=1)
        y = acc / (1.0 + tl.exp(-acc))  # SiLU
        tl.store(y_ptr + row[:, None] * y_rs + offs_c[None, :], rounded(y, y_ptr.dtype.element_ty, RNE),
                 mask=mrow)
        # shift: sequence row t (1..TAPS-1) becomes window row t-1
        shift = ((t >= 1) & mt)[None, :, None]
        tl.store(win_row + (taps - 1) * win_ts + chans,
                 rounded(seq, win_ptr.dtype.element_ty, RNE), mask=shift & m3)


def kda_conv(sh, *, x: torch.Tensor, w: torch.Tensor, window: torch.Tensor, y: torch.Tensor) -> None:
    rows, C = x.shape
    taps = w.shape[1]
    assert x.stride(1) == 1 and y.stride(1) == 1 and window.stride(2) == 1 and w.shape[0] == C
    assert window.shape == (rows, taps - 1, C), f"kda_conv: window {tuple(window.shape)}"
    if rows == 0:
        return
    if platform.FEW_PROGRAMS:  # interpreter: every row and channel in one program, one step
        block_c, rows_per = next_pow2(C), next_pow2(rows)
        block_r = rows_per
    else:
        block_c, rows_per = tunables.get("kda.conv.block_c"), tunables.get("kda.conv.rows_per_program")
        block_r = 1
    grid = (cdiv(C, block_c), cdiv(rows, rows_per))
    win_rs = window.stride(0)
    win_ts = window.stride(1) if taps > 1 else 0
    _conv_kernel[grid](
        x, x.stride(0), w, w.stride(0), w.stride(1), window, win_rs, win_ts, y, y.stride(0),
        rows, C, TAPS=taps, TP=next_pow2(taps), BLOCK_C=block_c, ROWS_PER=rows_per, BLOCK_R=block_r,
        RNE=INTERPRET, num_warps=tunables.get("kda.conv.num_warps"))
