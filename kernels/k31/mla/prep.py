"""mla.prep: the q / kv-latent / indexer-key RMSNorms, neox RoPE on the key's rope part, fp8 row
quantization and the append of this rank's new token to both paged caches.

One launch, grid ``(rows, 3)`` (under the interpreter ``(1, 3)``: a program takes every row, see
``platform.FEW_PROGRAMS``): task 0 normalizes ``q_a`` into ``q_n`` (every row); task 1 builds
the latent cache row ``rms(kv_a[:kv_lora]) || rope(kv_a[kv_lora:])`` and task 2 the indexer key
``rms(idx_k)``; tasks 1 and 2 quantize (scale = amax / 448, clamp, round-to-nearest-even
e4m3fn) and store only when the row's token is this rank's (``pos % cp == cp_rank``) at local
token ``pos // cp`` (page ``block_table[row, t // page_size]``, offset ``t % page_size``).

Numerics: divisions and the square root are the IEEE-rounded ``div_rn`` / ``sqrt_rn`` so the
f32 values match torch's; RoPE's inverse frequencies come from a table computed once per device
with the reference's own torch expression, so ``pos * inv_freq`` is bit-identical and only
cos/sin differ (by an f32 ulp). fp8 bytes can still differ from torch's by one fp8 ulp where the
f32 value before rounding differs by an ulp across a rounding boundary (reduction order).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import platform, tunables
from ..formats import FP8_MAX, FP8_MIN_SCALE
from ..platform import INTERPRET, cdiv, next_pow2
from ..rounding import rounded
from .rope import inv_freq


@triton.jit
def _rms_norm(x, w, n: tl.constexpr, eps):
    """Rows of ``x [R, B]`` times ``rsqrt(mean(x^2) + eps)`` times ``w [B]``, with IEEE-rounded
    divide and sqrt (padding is 0)."""
    ss = tl.sum(x * x, axis=1)
    r = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, n * 1.0) + eps))
    return x * r[:, None] * w[None, :]


@triton.jit
def _prep_kernel(
    q_a, q_a_s0, kv_a, kv_a_s0, idx_k, idx_k_s0, w_qa, w_kv, w_idxk, pos, bt, bt_s0, inv_freq,
    q_n, q_n_s0,
    kv_cache, kvc_s0, kvc_s1, kv_scale, kvs_s0, kvs_s1,
    idx_cache, ic_s0, ic_s1, idx_scale, is_s0, is_s1,
    rows, eps, fp8_max, min_scale,
    CP: tl.constexpr, CP_RANK: tl.constexpr, PAGE: tl.constexpr, MAX_PAGES: tl.constexpr,
    Q_LORA: tl.constexpr, KV_LORA: tl.constexpr, HALF: tl.constexpr, IDX_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_HALF: tl.constexpr,
    BLOCK_IDX: tl.constexpr, BLOCK_R: tl.constexpr, RNE: tl.constexpr,
):
    """Program (rb, task) does its task for rows ``[rb * BLOCK_R, (rb + 1) * BLOCK_R)`` (one row on a
    GPU); vectors are ``[BLOCK_R, width]``, per-row values ``[BLOCK_R]``."""
    row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    task = tl.program_id(1)
    live = row < rows
    row64 = row.to(tl.int64)[:, None]
    # Names differ per branch on purpose: Triton rejects a name bound to different shapes in
    # the two arms of a runtime `if`.
    if task == 0:
        offs_q = tl.arange(0, BLOCK_Q)
        mask_q = live[:, None] & (offs_q < Q_LORA)[None, :]
        xq = tl.load(q_a + row64 * q_a_s0 + offs_q[None, :], mask=mask_q, other=0.0).to(tl.float32)
        wq = tl.load(w_qa + offs_q, mask=offs_q < Q_LORA, other=0.0).to(tl.float32)
        yq = _rms_norm(xq, wq, Q_LORA, eps)
        tl.store(q_n + row64 * q_n_s0 + offs_q[None, :], rounded(yq, tl.bfloat16, RNE), mask=mask_q)
    else:
        p = tl.load(pos + row, mask=live, other=0).to(tl.int64)
        own = live & (p % CP == CP_RANK)  # the row's new token is this rank's
        if tl.max(own.to(tl.int32), axis=0) > 0:
            t = p // CP
            page_col = tl.minimum(t // PAGE, MAX_PAGES - 1)
            page = tl.load(bt + row.to(tl.int64) * bt_s0 + page_col, mask=own, other=0).to(tl.int64)
            off = t % PAGE
            if task == 1:
                offs_c = tl.arange(0, BLOCK_KV)
                mask_c = own[:, None] & (offs_c < KV_LORA)[None, :]
                kv_row = kv_a + row64 * kv_a_s0
                xc = tl.load(kv_row + offs_c[None, :], mask=mask_c, other=0.0).to(tl.float32)
                wc = tl.load(w_kv + offs_c, mask=offs_c < KV_LORA, other=0.0).to(tl.float32)
                c = _rms_norm(xc, wc, KV_LORA, eps)
                # neox RoPE: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
                offs_h = tl.arange(0, BLOCK_HALF)
                mask_h = own[:, None] & (offs_h < HALF)[None, :]
                x1 = tl.load(kv_row + KV_LORA + offs_h[None, :], mask=mask_h, other=0.0).to(tl.float32)
                x2 = tl.load(kv_row + KV_LORA + HALF + offs_h[None, :], mask=mask_h,
                             other=0.0).to(tl.float32)
                freq = tl.load(inv_freq + offs_h, mask=offs_h < HALF, other=0.0)
                ang = p.to(tl.float32)[:, None] * freq[None, :]
                cos = tl.cos(ang)
                sin = tl.sin(ang)
                r1 = x1 * cos - x2 * sin
                r2 = x2 * cos + x1 * sin
                amax_r = tl.maximum(tl.max(tl.abs(r1), axis=1), tl.max(tl.abs(r2), axis=1))
                amax_c = tl.maximum(tl.max(tl.abs(c), axis=1), amax_r)
                scale_c = tl.maximum(tl.div_rn(amax_c, fp8_max), min_scale)
                dst_c = (kv_cache + page * kvc_s0 + off * kvc_s1)[:, None]
                qc = tl.minimum(tl.maximum(tl.div_rn(c, scale_c[:, None]), -fp8_max), fp8_max)
                q1 = tl.minimum(tl.maximum(tl.div_rn(r1, scale_c[:, None]), -fp8_max), fp8_max)
                q2 = tl.minimum(tl.maximum(tl.div_rn(r2, scale_c[:, None]), -fp8_max), fp8_max)
                tl.store(dst_c + offs_c[None, :], rounded(qc, tl.float8e4nv, RNE), mask=mask_c)
                tl.store(dst_c + KV_LORA + offs_h[None, :], rounded(q1, tl.float8e4nv, RNE), mask=mask_h)
                tl.store(dst_c + KV_LORA + HALF + offs_h[None, :], rounded(q2, tl.float8e4nv, RNE),
                         mask=mask_h)
                tl.store(kv_scale + page * kvs_s0 + off * kvs_s1, scale_c, mask=own)
            else:
                offs_k = tl.arange(0, BLOCK_IDX)
                mask_k = own[:, None] & (offs_k < IDX_DIM)[None, :]
                xk = tl.load(idx_k + row64 * idx_k_s0 + offs_k[None, :], mask=mask_k,
                             other=0.0).to(tl.float32)
                wk = tl.load(w_idxk + offs_k, mask=offs_k < IDX_DIM, other=0.0).to(tl.float32)
                k = _rms_norm(xk, wk, IDX_DIM, eps)
                amax_k = tl.max(tl.abs(k), axis=1)
                scale_k = tl.maximum(tl.div_rn(amax_k, fp8_max), min_scale)
                qk = tl.minimum(tl.maximum(tl.div_rn(k, scale_k[:, None]), -fp8_max), fp8_max)
                dst_k = (idx_cache + page * ic_s0 + off * ic_s1)[:, None]
                tl.store(dst_k + offs_k[None, :], rounded(qk, tl.float8e4nv, RNE), mask=mask_k)
                tl.store(idx_scale + page * is_s0 + off * is_s1, scale_k, mask=own)


def mla_prep(sh, *, q_a, kv_a, idx_k, w_qa, w_kv, w_idxk, pos, block_table, q_n,
             kv_cache, kv_scale, idx_cache, idx_scale) -> None:
    """Launcher (contract ``mla.prep``). ``q_a``/``kv_a``/``idx_k`` may be column slices of one
    fused projection output (row stride taken from the view, last dim contiguous)."""
    d = sh.dims
    rows = q_a.shape[0]
    if rows == 0:
        return
    for t in (q_a, kv_a, idx_k, q_n):
        assert t.stride(-1) == 1, "mla.prep: last dims must be contiguous"
    assert kv_cache.stride(2) == 1 and idx_cache.stride(2) == 1
    half = d.rope_dim // 2
    inv = inv_freq(q_a.device, d.rope_dim, d.rope_theta)
    lo = sh.layout
    block_r = next_pow2(rows) if platform.FEW_PROGRAMS else 1  # interpreter: all rows at once
    _prep_kernel[(cdiv(rows, block_r), 3)](
        q_a, q_a.stride(0), kv_a, kv_a.stride(0), idx_k, idx_k.stride(0), w_qa, w_kv, w_idxk,
        pos, block_table, block_table.stride(0), inv,
        q_n, q_n.stride(0),
        kv_cache, kv_cache.stride(0), kv_cache.stride(1), kv_scale, kv_scale.stride(0),
        kv_scale.stride(1),
        idx_cache, idx_cache.stride(0), idx_cache.stride(1), idx_scale, idx_scale.stride(0),
        idx_scale.stride(1),
        rows, float(d.eps), float(FP8_MAX), float(FP8_MIN_SCALE),
        CP=lo.cp, CP_RANK=lo.cp_rank, PAGE=d.page_size, MAX_PAGES=block_table.shape[1],
        Q_LORA=d.q_lora, KV_LORA=d.kv_lora, HALF=half, IDX_DIM=d.idx_dim,
        BLOCK_Q=next_pow2(d.q_lora), BLOCK_KV=next_pow2(d.kv_lora),
        BLOCK_HALF=max(2, next_pow2(half)), BLOCK_IDX=next_pow2(d.idx_dim), BLOCK_R=block_r,
        RNE=INTERPRET,
        num_warps=tunables.get("mla.prep.num_warps"),
    )
