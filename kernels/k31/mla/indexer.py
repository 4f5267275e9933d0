"""DSA indexer logits over this rank's share of the context (``mla.index_logits``).

``logits[r, t] = c * sum_h w[r, h] * relu(scale_t * q[r, h] . k_t)`` for ``t < ctx_len[r]``,
``-inf`` for ``ctx_len[r] <= t < capacity``; ``c = (idx_dim * idx_heads) ** -0.5``.

Arguments (contract names):
* ``q_idx [rows, heads, dim]`` bf16, ``w_idx [rows, heads]`` (any float; may be strided views of
  the fused projections' outputs: every stride is passed, the last dim is expected contiguous);
* ``idx_cache [n_pages, page_size, dim]`` fp8 e4m3 keys, ``idx_scale [n_pages, page_size]`` f32;
* ``block_table [rows, max_pages]`` (int), ``ctx_len [rows]`` (int, local tokens of the rank);
* ``logits [rows, max_pages * page_size]`` f32, written in full.

Design: one program per (row, chunk of ``TILES * BLOCK_T`` tokens). The program loads the row's
queries once (``[heads, dim]``, padded to MMA-friendly powers of two) and, per tile of
``BLOCK_T`` tokens, gathers the fp8 key rows through the block table, upcasts them to bf16
(exact: every e4m3 value is a bf16 value) and runs ``tl.dot(q, k.T)`` with f32 accumulation.
Since every scale is positive, ``relu(scale * s) == scale * relu(s)``: the per-token scale is
applied to the ``[heads, BLOCK_T]`` scores after the dot, then relu, then the head-weighted sum.
Chunks that start past ``ctx_len`` only write ``-inf``. ``ctx_len`` is clamped to the capacity so
a bad length cannot read past the block table.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import platform
from ..platform import INTERPRET, cdiv, next_pow2
from ..tunables import get


@triton.jit
def _index_logits_kernel(
    q_ptr, w_ptr, cache_ptr, scale_ptr, bt_ptr, ctx_ptr, out_ptr,
    q_s0, q_s1, q_s2, w_s0, w_s1, c_s0, c_s1, c_s2, sc_s0, sc_s1, bt_s0, bt_s1, out_s0,
    cap, coef,
    HEADS: tl.constexpr, DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_T: tl.constexpr, TILES: tl.constexpr, DOT_F32: tl.constexpr,
):
    chunk = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)
    n = tl.minimum(tl.load(ctx_ptr + row).to(tl.int32), cap)
    t_first = chunk * (BLOCK_T * TILES)
    offs_t = tl.arange(0, BLOCK_T)
    out_row = out_ptr + row * out_s0
    if t_first >= n:
        # Nothing of this chunk is context: only the -inf padding.
        for i in tl.static_range(TILES):
            t = t_first + i * BLOCK_T + offs_t
            tl.store(out_row + t, tl.full([BLOCK_T], float("-inf"), tl.float32), mask=t < cap)
    else:
        offs_h = tl.arange(0, BLOCK_H)
        offs_d = tl.arange(0, BLOCK_D)
        h_ok = offs_h < HEADS
        d_ok = offs_d < DIM
        q = tl.load(q_ptr + row * q_s0 + offs_h[:, None] * q_s1 + offs_d[None, :] * q_s2,
                    mask=h_ok[:, None] & d_ok[None, :], other=0.0)
        if DOT_F32:
            q = q.to(tl.float32)
        else:
            q = q.to(tl.bfloat16)
        w = tl.load(w_ptr + row * w_s0 + offs_h * w_s1, mask=h_ok, other=0.0).to(tl.float32)
        for i in range(TILES):
            t = t_first + i * BLOCK_T + offs_t
            valid = t < n
            page = tl.load(bt_ptr + row * bt_s0 + (t // PAGE) * bt_s1, mask=valid, other=0)
            page = page.to(tl.int64)
            slot = t % PAGE
            k = tl.load(cache_ptr + page[:, None] * c_s0 + slot[:, None] * c_s1
                        + offs_d[None, :] * c_s2,
                        mask=valid[:, None] & d_ok[None, :], other=0.0)  # [BLOCK_T, BLOCK_D] fp8
            if DOT_F32:
                k = k.to(tl.float32)
            else:
                k = k.to(tl.bfloat16)
            scale = tl.load(scale_ptr + page * sc_s0 + slot * sc_s1, mask=valid, other=0.0)
            s = tl.dot(q, tl.trans(k))  # [BLOCK_H, BLOCK_T], f32 accumulation
            s = tl.maximum(s * scale[None, :], 0.0)
            logit = tl.sum(s * w[:, None], axis=0) * coef
            logit = tl.where(valid, logit, float("-inf"))
            tl.store(out_row + t, logit, mask=t < cap)


def mla_index_logits(sh, *, q_idx: torch.Tensor, w_idx: torch.Tensor, idx_cache: torch.Tensor,
                     idx_scale: torch.Tensor, block_table: torch.Tensor, ctx_len: torch.Tensor,
                     logits: torch.Tensor) -> None:
    dims = sh.dims
    rows, heads, dim = q_idx.shape
    page = dims.page_size
    cap = logits.shape[1]
    assert cap == block_table.shape[1] * page, "logits must span max_pages * page_size tokens"
    assert logits.stride(1) == 1 and idx_scale.dtype == torch.float32
    if rows == 0 or cap == 0:
        return
    if platform.FEW_PROGRAMS:  # interpreter: a row's whole capacity (up to 8192 tokens) in one tile
        block_t, tiles = min(max(16, next_pow2(cap)), 8192), 1
    else:
        block_t, tiles = get("mla.index_logits.block_t"), get("mla.index_logits.tiles")
    coef = float((dims.idx_dim * dims.idx_heads) ** -0.5)
    grid = (cdiv(cap, block_t * tiles), rows)
    _index_logits_kernel[grid](
        q_idx, w_idx, idx_cache, idx_scale, block_table, ctx_len, logits,
        q_idx.stride(0), q_idx.stride(1), q_idx.stride(2), w_idx.stride(0), w_idx.stride(1),
        idx_cache.stride(0), idx_cache.stride(1), idx_cache.stride(2),
        idx_scale.stride(0), idx_scale.stride(1), block_table.stride(0), block_table.stride(1),
        logits.stride(0), cap, coef,
        HEADS=heads, DIM=dim, BLOCK_H=max(16, next_pow2(heads)), BLOCK_D=max(16, next_pow2(dim)),
        PAGE=page, BLOCK_T=block_t, TILES=tiles, DOT_F32=INTERPRET,
        num_warps=get("mla.index_logits.num_warps"), num_stages=get("mla.index_logits.num_stages"),
    )
