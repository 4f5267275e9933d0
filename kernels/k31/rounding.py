"""Rounding casts of f32 values that give the same bits in Triton's CPU interpreter as on a GPU.

Why: triton 3.9's interpreter casts f32 -> bf16 by truncation (every bf16 result biased by up
to an ulp, a systematic error the accuracy tests would flag) and drops the carry into the
exponent in f32 -> float8e4nv (7.96 becomes 4 instead of 8). The GPU's conversions
(``cvt.rn.bf16.f32``, ``cvt.rn.satfinite.e4m3x2.f32``) round to nearest, ties to even.

Contract of :func:`rounded`: ``x`` (f32) cast to ``dtype`` with round-to-nearest-even. ``RNE``
must be ``platform.INTERPRET``, passed down by the launcher as a constexpr:

* ``RNE`` set (interpreter): the value is first snapped onto the grid of ``dtype`` with integer
  or float arithmetic in f32, so the interpreter's cast that follows is exact. bf16 by adding
  half an ulp (``0x7FFF`` plus the lowest kept bit, ties to even) and clearing the low 16 bits;
  e4m3 by adding and subtracting ``1.5 * 2**23 * ulp`` (ulp = 2**(exponent - 3), subnormal
  below 2**-6), which rounds to a multiple of ulp with ties to even; the sign of a zero is
  kept. e4m3 inputs must already lie in [-448, 448] (the callers clamp before quantizing).
* ``RNE`` clear (GPU): exactly the native cast ``x.to(dtype)``; nothing else is emitted.

Other target dtypes (f32, f16, ...) get the plain cast either way.

This file is shared by every op family: a change here makes the gates treat every op as
touched (``contracts.ops_touched_by`` returns None for a file no single op owns).
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def rounded(x, dtype: tl.constexpr, RNE: tl.constexpr):
    """``x`` (f32) -> ``dtype``, round to nearest even on the GPU and under the interpreter."""
    if RNE:
        if dtype == tl.bfloat16:
            u = x.to(tl.uint32, bitcast=True)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
            x = u.to(tl.float32, bitcast=True)  # exact in bf16: the cast keeps it
        elif dtype == tl.float8e4nv:
            u = x.to(tl.uint32, bitcast=True)
            e = ((u >> 23) & 0xFF).to(tl.int32)
            ulp_e = tl.maximum(e - 127, -6) - 3  # e4m3: 3 mantissa bits, subnormal below 2^-6
            c = (((ulp_e + 150) << 23) | 0x400000).to(tl.uint32).to(tl.float32, bitcast=True)
            r = (x + c) - c
            x = tl.where(r == 0.0, x * 0.0, r)  # keep the sign of a zero
    return x.to(dtype)
