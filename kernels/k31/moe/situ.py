"""moe.situ: the SiTU activation ``4 tanh(g/4) sigmoid(g) 25 tanh(u/25)`` of a fused gate|up
projection, for the shared experts (intermediate 768 per rank) and the dense layer-0 MLP (4224).

Shapes: ``gu [rows, 2I]`` (gate | up; may be a strided view, row stride ``gu.stride(0)``, last dim
contiguous) -> ``out [rows, I]`` bf16.

Design: grid ``(rows, cdiv(I, block))``; each program loads ``block`` gate and ``block`` up
values of one row, evaluates SiTU in f32 and stores bf16. Memory-bound elementwise.

The routed-experts FC1 epilogue (experts.py) carries its own copy of the SiTU helpers: the
gates map each source file to the ops it owns, so a shared helper here would let a change to
this file alter moe.experts unchecked.
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
def _tanh_f32(z):
    """tanh in f32 from core ops only (no tl.tanh in triton 3.6's core language).

    Small |z| uses the odd Taylor series to z^7 (next term < 2e-9 relative at |z| < 1/8), where
    ``(1 - e^-2|z|) / (1 + e^-2|z|)`` would lose digits to cancellation; large |z| uses that
    form, which saturates to +-1 without overflow (e^-2|z| -> 0)."""
    a = tl.abs(z)
    t = tl.exp(-2.0 * a)
    big = (1.0 - t) / (1.0 + t)
    z2 = z * z
    small = z * (1.0 + z2 * (-1.0 / 3.0 + z2 * (2.0 / 15.0 + z2 * (-17.0 / 315.0))))
    return tl.where(a < 0.125, small, tl.where(z < 0, -big, big))


@triton.jit
def _situ_f32(g, u):
    """SiTU of f32 gate and up values (reference.situ)."""
    sig = 1.0 / (1.0 + tl.exp(-g))
    return 4.0 * _tanh_f32(g * 0.25) * sig * (25.0 * _tanh_f32(u * 0.04))


@triton.jit
def _situ_kernel(gu_ptr, gu_rs, out_ptr, out_rs, inter, BLOCK: tl.constexpr, RNE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < inter
    src = gu_ptr + row.to(tl.int64) * gu_rs + cols
    g = tl.load(src, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(src + inter, mask=ok, other=0.0).to(tl.float32)
    h = _situ_f32(g, u)
    tl.store(out_ptr + row.to(tl.int64) * out_rs + cols, _rounded(h, out_ptr.dtype.element_ty, RNE), mask=ok)


def moe_situ(sh, *, gu: torch.Tensor, out: torch.Tensor) -> None:
    rows, inter = out.shape
    assert gu.shape == (rows, 2 * inter) and gu.stride(1) == 1 and out.stride(1) == 1
    if rows == 0:
        return
    block = min(tunables.get("moe.situ.block"), triton.next_power_of_2(inter))
    _situ_kernel[(rows, cdiv(inter, block))](
        gu, gu.stride(0), out, out.stride(0), inter, BLOCK=block, RNE=INTERPRET,
        num_warps=tunables.get("moe.situ.num_warps"))
