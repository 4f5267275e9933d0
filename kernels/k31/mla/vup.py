"""mla.vup_gate: ``o[r, h*v_dim + v] = (o_lat[r, h] @ W_UV[h])[v] * sigmoid(gate[r, h*v_dim + v])``.

Grid ``(cdiv(rows, BLOCK_M), heads, cdiv(v_dim, BLOCK_N))``; each program steps over
``kv_lora`` in ``BLOCK_K`` chunks. ``o_lat`` is f32, so each chunk is split into a bf16 high
part and a bf16 residual (``hi + lo`` carries 16 mantissa bits) and both go through bf16 dots
with f32 accumulation against the bf16 weight (exact in bf16): the result is f32-accurate to
~2^-16 at tensor-core speed instead of the ~2^-9 a single bf16 rounding of ``o_lat`` would
cost. The sigmoid gate is fused into the epilogue. ``gate`` may be a column slice of the fused
input projection (row stride from the view).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .. import platform, tunables
from ..platform import INTERPRET, cdiv, next_pow2
from ..rounding import rounded


@triton.jit
def _vup_kernel(
    o_lat, ol_s0, ol_s1, w_uv, wv_s0, wv_s1, gate, g_s0, out, o_s0, rows,
    LORA: tl.constexpr, V: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_F32: tl.constexpr, RNE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    h = tl.program_id(1)
    pid_n = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < rows
    mask_n = offs_n < V
    a_rows = o_lat + offs_m.to(tl.int64)[:, None] * ol_s0 + h * ol_s1
    w_head = w_uv + h * wv_s0
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, LORA, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < LORA
        a = tl.load(a_rows + offs_k[None, :], mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(w_head + offs_k[:, None] * wv_s1 + offs_n[None, :],
                    mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        a_hi = rounded(a, tl.bfloat16, RNE)
        a_lo = rounded(a - a_hi.to(tl.float32), tl.bfloat16, RNE)
        if DOT_F32:  # the interpreter's bf16 dot is wrong; f32 of bf16 values is exact
            acc += tl.dot(a_hi.to(tl.float32), b.to(tl.float32))
            acc += tl.dot(a_lo.to(tl.float32), b.to(tl.float32))
        else:
            acc = tl.dot(a_hi, b, acc)
            acc = tl.dot(a_lo, b, acc)
    mask = mask_m[:, None] & mask_n[None, :]
    g = tl.load(gate + offs_m.to(tl.int64)[:, None] * g_s0 + h * V + offs_n[None, :], mask=mask,
                other=0.0).to(tl.float32)
    y = acc * (1.0 / (1.0 + tl.exp(-g)))
    tl.store(out + offs_m.to(tl.int64)[:, None] * o_s0 + h * V + offs_n[None, :],
             rounded(y, tl.bfloat16, RNE), mask=mask)


def mla_vup_gate(sh, *, o_lat, w_uv, gate, o) -> None:
    """Launcher (contract ``mla.vup_gate``): ``o_lat [rows, heads, kv_lora]`` f32,
    ``w_uv [heads, kv_lora, v_dim]``, ``gate [rows, heads * v_dim]`` -> ``o`` bf16."""
    d = sh.dims
    rows, heads = o_lat.shape[0], o_lat.shape[1]
    if rows == 0:
        return
    assert o_lat.stride(2) == 1 and w_uv.stride(2) == 1 and gate.stride(1) == 1
    assert o.stride(1) == 1
    block_n = max(16, next_pow2(d.v_dim))
    block_k = max(16, next_pow2(d.kv_lora))
    if platform.FEW_PROGRAMS:  # interpreter: every row, v column and K of a head in one program
        block_m = max(16, next_pow2(rows))
    else:
        block_m = tunables.get("mla.vup_gate.block_m")
        block_n = min(tunables.get("mla.vup_gate.block_n"), block_n)
        block_k = min(tunables.get("mla.vup_gate.block_k"), block_k)
    grid = (cdiv(rows, block_m), heads, cdiv(d.v_dim, block_n))
    _vup_kernel[grid](
        o_lat, o_lat.stride(0), o_lat.stride(1), w_uv, w_uv.stride(0), w_uv.stride(1),
        gate, gate.stride(0), o, o.stride(0), rows,
        LORA=d.kv_lora, V=d.v_dim, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        DOT_F32=INTERPRET, RNE=INTERPRET,
        num_warps=tunables.get("mla.vup_gate.num_warps"),
    )
