"""moe.latent_norm: RMSNorm ``out = x * rsqrt(mean(x^2) + eps) * w`` (generic over the width; used
for the summed latent with gamma_lat, width 3584 at full size).

Shapes: ``x [rows, D]`` (may be a strided view, row stride ``x.stride(0)``, last dim contiguous),
``w [D]`` (any float dtype), ``out [rows, D]`` bf16.

Design: one program per row holding the whole row (``next_pow2(D)`` lanes) in registers, so x
is read once: sum of squares in f32, one scale, multiply by w, store. Rows are few (16..256)
and D ~ 3.5k, so this is latency-bound; num_warps is the knob.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import tunables
from ..platform import INTERPRET, next_pow2


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
def _rmsnorm_kernel(x_ptr, x_rs, w_ptr, out_ptr, out_rs, D, eps, BLOCK_D: tl.constexpr, RNE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    ok = d < D
    x = tl.load(x_ptr + row * x_rs + d, mask=ok, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / D + eps)
    w = tl.load(w_ptr + d, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_rs + d, _rounded(x * inv * w, out_ptr.dtype.element_ty, RNE), mask=ok)


def rmsnorm(sh, *, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    rows, D = x.shape
    assert out.shape == (rows, D) and w.shape == (D,)
    assert x.stride(1) == 1 and out.stride(1) == 1 and w.stride(0) == 1
    if rows == 0:
        return
    _rmsnorm_kernel[(rows,)](x, x.stride(0), w, out, out.stride(0), D, float(sh.dims.eps),
                             BLOCK_D=next_pow2(D), RNE=INTERPRET, num_warps=tunables.get("moe.latent_norm.num_warps"))
