"""lm_head over this rank's vocabulary share and its argmax (``lm_head.argmax``).

``logits = x @ w.T`` (f32, ``[rows, vocab_local]``), ``top_val[r] = max_v logits[r, v]`` (f32),
``top_idx[r]`` = the lowest local id reaching it plus ``sh.vocab_first`` (int64, global id).

Design: two launches, no float atomics (deterministic):

1. ``_head_tile_kernel``: a tiled matmul, one program per (row tile, vocab tile), K-loop of
   ``tl.dot`` on bf16 operands with f32 accumulation. It stores its logits tile and, per row,
   the tile's (max, lowest local id reaching the max) into a cached scratch
   ``[rows, vocab tiles]``. The row tile is the fastest grid axis so the programs that share a
   weight tile run together and the weight streams from HBM about once.
2. ``_head_reduce_kernel``: one program per row (under the interpreter: all rows) reduces its
   partials in vocab order: the max,
   then the lowest id among tiles reaching it (tiles cover increasing ids, so this is the
   global lowest id).

``x`` may be a strided view (its strides are passed); the scratch is allocated once per
(device, rows, tiles) on the first (eager) call, so graph capture sees no allocation.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import platform, scratch
from ..platform import INTERPRET, cdiv, next_pow2
from ..tunables import get


@triton.jit
def _head_tile_kernel(
    x_ptr, w_ptr, out_ptr, pval_ptr, pidx_ptr,
    rows, vocab, hidden, x_s0, x_s1, w_s0, w_s1, out_s0, p_s0,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < rows
    n_ok = offs_n < vocab
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * x_s0
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * w_s0
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        k = k0 + offs_k
        k_ok = k < hidden
        a = tl.load(x_rows + k[None, :] * x_s1, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_rows + k[None, :] * w_s1, mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        if DOT_F32:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, tl.trans(b))
    tl.store(out_ptr + offs_m.to(tl.int64)[:, None] * out_s0 + offs_n[None, :], acc,
             mask=m_ok[:, None] & n_ok[None, :])
    # This tile's max per row and the lowest local id reaching it.
    v = tl.where(n_ok[None, :], acc, float("-inf"))
    best = tl.max(v, axis=1)
    best_id = tl.min(tl.where(v == best[:, None], offs_n[None, :], 0x7FFFFFFF), axis=1)
    best_id = tl.minimum(best_id, vocab - 1)  # a NaN row has no id reaching the max: stay in range
    p = offs_m.to(tl.int64) * p_s0 + pid_n
    tl.store(pval_ptr + p, best, mask=m_ok)
    tl.store(pidx_ptr + p, best_id, mask=m_ok)


@triton.jit
def _head_reduce_kernel(
    pval_ptr, pidx_ptr, val_ptr, idx_ptr, rows, tiles, p_s0, vocab_first,
    BLOCK: tl.constexpr, BLOCK_R: tl.constexpr,
):
    """Program ``pid`` reduces rows ``[pid * BLOCK_R, (pid + 1) * BLOCK_R)``,
    tiles ``[BLOCK_R, BLOCK]``."""
    row = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    live = row < rows
    j = tl.arange(0, BLOCK)
    ok = (j < tiles)[None, :]
    m2 = live[:, None] & ok
    v = tl.load(pval_ptr + row[:, None] * p_s0 + j[None, :], mask=m2, other=float("-inf"))
    i = tl.load(pidx_ptr + row[:, None] * p_s0 + j[None, :], mask=m2, other=0x7FFFFFFF)
    best = tl.max(v, axis=1)
    best_id = tl.min(tl.where(ok & (v == best[:, None]), i, 0x7FFFFFFF), axis=1)
    best_id = tl.minimum(best_id, tl.max(tl.where(ok, i, 0), axis=1))  # NaN guard, as above
    tl.store(val_ptr + row, best, mask=live)
    tl.store(idx_ptr + row, best_id.to(tl.int64) + vocab_first, mask=live)


def lm_head(sh, *, x: torch.Tensor, w: torch.Tensor, logits: torch.Tensor, top_val: torch.Tensor,
            top_idx: torch.Tensor) -> None:
    rows, hidden = x.shape
    vocab = w.shape[0]
    assert w.shape[1] == hidden and logits.shape == (rows, vocab) and logits.stride(1) == 1
    if rows == 0:
        return
    block_m = max(16, next_pow2(rows))
    if platform.FEW_PROGRAMS:  # interpreter: all rows and up to 1024 x 1024 of w in one program
        block_n, block_k = min(next_pow2(vocab), 1024), min(next_pow2(hidden), 1024)
        block_r = next_pow2(rows)
    else:
        block_n, block_k, block_r = get("lm_head.argmax.block_n"), get("lm_head.argmax.block_k"), 1
        block_m = min(get("lm_head.argmax.block_m_max"), block_m)
    tiles = cdiv(vocab, block_n)
    pval = scratch.empty("lm_head.argmax.tile_max", x.device, (rows, tiles), torch.float32)
    pidx = scratch.empty("lm_head.argmax.tile_idx", x.device, (rows, tiles), torch.int32)
    _head_tile_kernel[(cdiv(rows, block_m), tiles)](
        x, w, logits, pval, pidx, rows, vocab, hidden,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), logits.stride(0), pval.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, DOT_F32=INTERPRET,
        num_warps=get("lm_head.argmax.num_warps"), num_stages=get("lm_head.argmax.num_stages"),
    )
    _head_reduce_kernel[(cdiv(rows, block_r),)](
        pval, pidx, top_val, top_idx, rows, tiles, pval.stride(0), sh.vocab_first,
        BLOCK=max(16, next_pow2(tiles)), BLOCK_R=block_r, num_warps=4,
    )
