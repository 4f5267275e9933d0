"""moe.latent_norm: RMSNorm ``out = x * rsqrt(mean(x^2) + eps) * w`` (generic over the width; used
for the summed latent with gamma_lat, width 3584 at full size).

Shapes: ``x [rows, D]`` (may be a strided view, row stride ``x.stride(0)``, last dim contiguous),
``w [D]`` (any float dtype), ``out [rows, D]`` bf16.

Design: one program per row (under the interpreter: per batch, see ``platform.FEW_PROGRAMS``)
holding the whole row (``next_pow2(D)`` lanes) in registers, so x
is read once: sum of squares in f32, one scale, multiply by w, store. Rows are few (16..256)
and D ~ 3.5k, so this is latency-bound; num_warps is the knob.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import platform, tunables
from ..platform import INTERPRET, cdiv, next_pow2
from ..rounding import rounded


@triton.jit
def _rmsnorm_kernel(x_ptr, x_rs, w_ptr, out_ptr, out_rs, rows, D, eps,
                    BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr, RNE: tl.constexpr):
    """Program ``pid`` normalizes rows ``[pid * BLOCK_R, (pid + 1) * BLOCK_R)``, tile
    ``[BLOCK_R, BLOCK_D]``."""
    row = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    ok = d < D
    m2 = (row < rows)[:, None] & ok[None, :]
    x = tl.load(x_ptr + row[:, None] * x_rs + d[None, :], mask=m2, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / D + eps)
    w = tl.load(w_ptr + d, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row[:, None] * out_rs + d[None, :],
             rounded(x * inv[:, None] * w[None, :], out_ptr.dtype.element_ty, RNE), mask=m2)


def rmsnorm(sh, *, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    rows, D = x.shape
    assert out.shape == (rows, D) and w.shape == (D,)
    assert x.stride(1) == 1 and out.stride(1) == 1 and w.stride(0) == 1
    if rows == 0:
        return
    # GPU: one row per program; interpreter: the whole batch in one program
    block_r = next_pow2(rows) if platform.FEW_PROGRAMS else 1
    _rmsnorm_kernel[(cdiv(rows, block_r),)](
        x, x.stride(0), w, out, out.stride(0), rows, D, float(sh.dims.eps),
        BLOCK_D=next_pow2(D), BLOCK_R=block_r, RNE=INTERPRET,
        num_warps=tunables.get("moe.latent_norm.num_warps"))
