"""mla.absorb: ``q_full[r, h] = (q_nope[r, h] @ W_UK[h]) || rope(q_rope[r, h])``.

Grid ``(cdiv(rows, BLOCK_M), heads, n_col_blocks + 1)``: programs with ``pid_n < n_col_blocks``
compute a ``BLOCK_M x BLOCK_N`` tile of the absorbed latent query with one ``tl.dot`` over the
whole ``nope_dim`` (bf16 operands, f32 accumulation); the last column program of each (row
block, head) applies neox RoPE to that tile's ``q_rope`` part. ``qb`` may be a strided view of
the fused q_b projection (``[rows, heads, q_head_dim]`` with any row / head stride).

RoPE's inverse frequencies come from a table computed once per device with the reference's
torch expression, so the angle ``pos * inv_freq`` is bit-identical to the reference's.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import platform, tunables
from ..platform import INTERPRET, cdiv, next_pow2
from ..rounding import rounded
from .rope import inv_freq


@triton.jit
def _absorb_kernel(
    qb, qb_s0, qb_s1, w_uk, wk_s0, wk_s1, pos, inv_freq, out, o_s0, o_s1, rows,
    NOPE: tl.constexpr, LORA: tl.constexpr, HALF: tl.constexpr, N_COL_BLOCKS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_HALF: tl.constexpr, DOT_F32: tl.constexpr, RNE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    h = tl.program_id(1)
    pid_n = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < rows
    q_rows = qb + offs_m.to(tl.int64)[:, None] * qb_s0 + h * qb_s1
    o_rows = out + offs_m.to(tl.int64)[:, None] * o_s0 + h * o_s1
    if pid_n < N_COL_BLOCKS:
        offs_k = tl.arange(0, BLOCK_K)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_k = offs_k < NOPE
        mask_n = offs_n < LORA
        a = tl.load(q_rows + offs_k[None, :], mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(w_uk + h * wk_s0 + offs_k[:, None] * wk_s1 + offs_n[None, :],
                    mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if DOT_F32:  # the interpreter's bf16 dot is wrong; f32 of bf16 values is exact
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b)
        tl.store(o_rows + offs_n[None, :], rounded(acc, tl.bfloat16, RNE),
                 mask=mask_m[:, None] & mask_n[None, :])
    else:
        offs_h = tl.arange(0, BLOCK_HALF)
        mask_h = offs_h < HALF
        mask = mask_m[:, None] & mask_h[None, :]
        x1 = tl.load(q_rows + NOPE + offs_h[None, :], mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(q_rows + NOPE + HALF + offs_h[None, :], mask=mask, other=0.0).to(tl.float32)
        p = tl.load(pos + offs_m, mask=mask_m, other=0).to(tl.float32)
        ang = p[:, None] * tl.load(inv_freq + offs_h, mask=mask_h, other=0.0)[None, :]
        cos = tl.cos(ang)
        sin = tl.sin(ang)
        tl.store(o_rows + LORA + offs_h[None, :], rounded(x1 * cos - x2 * sin, tl.bfloat16, RNE),
                 mask=mask)
        tl.store(o_rows + LORA + HALF + offs_h[None, :], rounded(x2 * cos + x1 * sin, tl.bfloat16, RNE),
                 mask=mask)


def mla_absorb(sh, *, qb, w_uk, pos, q_full) -> None:
    """Launcher (contract ``mla.absorb``): ``qb [rows, heads, q_head_dim]`` (strided view ok),
    ``w_uk [heads, nope_dim, kv_lora]``, ``pos [rows]`` -> ``q_full [rows, heads, cache_row]``."""
    d = sh.dims
    rows, heads = qb.shape[0], qb.shape[1]
    if rows == 0:
        return
    assert qb.stride(2) == 1 and w_uk.stride(2) == 1 and q_full.stride(2) == 1
    half = d.rope_dim // 2
    if platform.FEW_PROGRAMS:  # interpreter: every row and latent column of a head in one tile
        block_m, block_n = max(16, next_pow2(rows)), max(16, next_pow2(d.kv_lora))
    else:
        block_m = tunables.get("mla.absorb.block_m")
        block_n = min(tunables.get("mla.absorb.block_n"), max(16, next_pow2(d.kv_lora)))
    n_col_blocks = cdiv(d.kv_lora, block_n)
    grid = (cdiv(rows, block_m), heads, n_col_blocks + 1)
    _absorb_kernel[grid](
        qb, qb.stride(0), qb.stride(1), w_uk, w_uk.stride(0), w_uk.stride(1), pos,
        inv_freq(qb.device, d.rope_dim, d.rope_theta), q_full, q_full.stride(0),
        q_full.stride(1), rows,
        NOPE=d.nope_dim, LORA=d.kv_lora, HALF=half, N_COL_BLOCKS=n_col_blocks,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=max(16, next_pow2(d.nope_dim)),
        BLOCK_HALF=max(2, next_pow2(half)), DOT_F32=INTERPRET, RNE=INTERPRET,
        num_warps=tunables.get("mla.absorb.num_warps"),
    )
