"""mla.prep: the q / kv-latent / indexer-key RMSNorms, neox RoPE on the key's rope part, fp8 row
quantization and the append of this rank's new token to both paged caches.

One launch, grid ``(rows, 3)``: task 0 normalizes ``q_a`` into ``q_n`` (every row); task 1 builds
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

from .. import tunables
from ..formats import FP8_MAX, FP8_MIN_SCALE
from ..platform import INTERPRET, next_pow2

_INV_FREQ: dict = {}


def _inv_freq(device: torch.device, d: int, theta: float) -> torch.Tensor:
    """RoPE inverse frequencies ``[d // 2]`` f32, computed exactly as ``reference.rope`` does
    (cached: allocated on the first, eager call only)."""
    key = (str(device), d, float(theta))
    t = _INV_FREQ.get(key)
    if t is None:
        half = d // 2
        t = theta ** (-(torch.arange(half, device=device, dtype=torch.float32) * 2.0) / d)
        _INV_FREQ[key] = t
    return t


@triton.jit
def _round_bf16(x, EMULATE: tl.constexpr):
    """f32 -> bf16, round to nearest even. Triton 3.9's interpreter truncates instead, so under
    it (EMULATE) round the f32 bits first; the GPU's cvt.rn.bf16.f32 already rounds so."""
    if EMULATE:
        u = x.to(tl.uint32, bitcast=True)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        x = u.to(tl.float32, bitcast=True)
    return x.to(tl.bfloat16)


@triton.jit
def _round_e4m3(x, EMULATE: tl.constexpr):
    """f32 in [-448, 448] -> float8_e4m3fn, round to nearest even (Hopper:
    cvt.rn.satfinite.e4m3x2.f32). The interpreter's conversion drops the carry into the
    exponent (7.96 -> 4), so under it (EMULATE) snap to the e4m3 grid in f32 first: adding and
    subtracting 1.5 * 2^23 * ulp rounds to a multiple of ulp with ties to even."""
    if EMULATE:
        u = x.to(tl.uint32, bitcast=True)
        e = ((u >> 23) & 0xFF).to(tl.int32)
        ulp_e = tl.maximum(e - 127, -6) - 3  # e4m3: 3 mantissa bits, subnormal below 2^-6
        c = (((ulp_e + 150) << 23) | 0x400000).to(tl.uint32).to(tl.float32, bitcast=True)
        r = (x + c) - c
        x = tl.where(r == 0.0, x * 0.0, r)  # keep the sign of a zero
    return x.to(tl.float8e4nv)


@triton.jit
def _rms_norm(x, w, n: tl.constexpr, eps):
    """``x * rsqrt(mean(x^2) + eps) * w`` with IEEE-rounded divide and sqrt (padding is 0)."""
    ss = tl.sum(x * x, axis=0)
    r = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, n * 1.0) + eps))
    return x * r * w


@triton.jit
def _prep_kernel(
    q_a, q_a_s0, kv_a, kv_a_s0, idx_k, idx_k_s0, w_qa, w_kv, w_idxk, pos, bt, bt_s0, inv_freq,
    q_n, q_n_s0,
    kv_cache, kvc_s0, kvc_s1, kv_scale, kvs_s0, kvs_s1,
    idx_cache, ic_s0, ic_s1, idx_scale, is_s0, is_s1,
    eps, fp8_max, min_scale,
    CP: tl.constexpr, CP_RANK: tl.constexpr, PAGE: tl.constexpr, MAX_PAGES: tl.constexpr,
    Q_LORA: tl.constexpr, KV_LORA: tl.constexpr, HALF: tl.constexpr, IDX_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_HALF: tl.constexpr,
    BLOCK_IDX: tl.constexpr, EMULATE: tl.constexpr,
):
    row = tl.program_id(0)
    task = tl.program_id(1)
    row64 = row.to(tl.int64)
    # Names differ per branch on purpose: Triton rejects a name bound to different shapes in
    # the two arms of a runtime `if`.
    if task == 0:
        offs_q = tl.arange(0, BLOCK_Q)
        mask_q = offs_q < Q_LORA
        xq = tl.load(q_a + row64 * q_a_s0 + offs_q, mask=mask_q, other=0.0).to(tl.float32)
        wq = tl.load(w_qa + offs_q, mask=mask_q, other=0.0).to(tl.float32)
        yq = _rms_norm(xq, wq, Q_LORA, eps)
        tl.store(q_n + row64 * q_n_s0 + offs_q, _round_bf16(yq, EMULATE), mask=mask_q)
    else:
        p = tl.load(pos + row).to(tl.int64)
        if p % CP == CP_RANK:
            t = p // CP
            page_col = tl.minimum(t // PAGE, MAX_PAGES - 1)
            page = tl.load(bt + row64 * bt_s0 + page_col).to(tl.int64)
            off = t % PAGE
            if task == 1:
                offs_c = tl.arange(0, BLOCK_KV)
                mask_c = offs_c < KV_LORA
                kv_row = kv_a + row64 * kv_a_s0
                xc = tl.load(kv_row + offs_c, mask=mask_c, other=0.0).to(tl.float32)
                wc = tl.load(w_kv + offs_c, mask=mask_c, other=0.0).to(tl.float32)
                c = _rms_norm(xc, wc, KV_LORA, eps)
                # neox RoPE: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
                offs_h = tl.arange(0, BLOCK_HALF)
                mask_h = offs_h < HALF
                x1 = tl.load(kv_row + KV_LORA + offs_h, mask=mask_h, other=0.0).to(tl.float32)
                x2 = tl.load(kv_row + KV_LORA + HALF + offs_h, mask=mask_h,
                             other=0.0).to(tl.float32)
                ang = p.to(tl.float32) * tl.load(inv_freq + offs_h, mask=mask_h, other=0.0)
                cos = tl.cos(ang)
                sin = tl.sin(ang)
                r1 = x1 * cos - x2 * sin
                r2 = x2 * cos + x1 * sin
                amax_r = tl.maximum(tl.max(tl.abs(r1), axis=0), tl.max(tl.abs(r2), axis=0))
                amax_c = tl.maximum(tl.max(tl.abs(c), axis=0), amax_r)
                scale_c = tl.maximum(tl.div_rn(amax_c, fp8_max), min_scale)
                dst_c = kv_cache + page * kvc_s0 + off * kvc_s1
                qc = tl.minimum(tl.maximum(tl.div_rn(c, scale_c), -fp8_max), fp8_max)
                q1 = tl.minimum(tl.maximum(tl.div_rn(r1, scale_c), -fp8_max), fp8_max)
                q2 = tl.minimum(tl.maximum(tl.div_rn(r2, scale_c), -fp8_max), fp8_max)
                tl.store(dst_c + offs_c, _round_e4m3(qc, EMULATE), mask=mask_c)
                tl.store(dst_c + KV_LORA + offs_h, _round_e4m3(q1, EMULATE), mask=mask_h)
                tl.store(dst_c + KV_LORA + HALF + offs_h, _round_e4m3(q2, EMULATE), mask=mask_h)
                tl.store(kv_scale + page * kvs_s0 + off * kvs_s1, scale_c)
            else:
                offs_k = tl.arange(0, BLOCK_IDX)
                mask_k = offs_k < IDX_DIM
                xk = tl.load(idx_k + row64 * idx_k_s0 + offs_k, mask=mask_k,
                             other=0.0).to(tl.float32)
                wk = tl.load(w_idxk + offs_k, mask=mask_k, other=0.0).to(tl.float32)
                k = _rms_norm(xk, wk, IDX_DIM, eps)
                amax_k = tl.max(tl.abs(k), axis=0)
                scale_k = tl.maximum(tl.div_rn(amax_k, fp8_max), min_scale)
                qk = tl.minimum(tl.maximum(tl.div_rn(k, scale_k), -fp8_max), fp8_max)
                dst_k = idx_cache + page * ic_s0 + off * ic_s1
                tl.store(dst_k + offs_k, _round_e4m3(qk, EMULATE), mask=mask_k)
                tl.store(idx_scale + page * is_s0 + off * is_s1, scale_k)


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
    inv = _inv_freq(q_a.device, d.rope_dim, d.rope_theta)
    lo = sh.layout
    _prep_kernel[(rows, 3)](
        q_a, q_a.stride(0), kv_a, kv_a.stride(0), idx_k, idx_k.stride(0), w_qa, w_kv, w_idxk,
        pos, block_table, block_table.stride(0), inv,
        q_n, q_n.stride(0),
        kv_cache, kv_cache.stride(0), kv_cache.stride(1), kv_scale, kv_scale.stride(0),
        kv_scale.stride(1),
        idx_cache, idx_cache.stride(0), idx_cache.stride(1), idx_scale, idx_scale.stride(0),
        idx_scale.stride(1),
        float(d.eps), float(FP8_MAX), float(FP8_MIN_SCALE),
        CP=lo.cp, CP_RANK=lo.cp_rank, PAGE=d.page_size, MAX_PAGES=block_table.shape[1],
        Q_LORA=d.q_lora, KV_LORA=d.kv_lora, HALF=half, IDX_DIM=d.idx_dim,
        BLOCK_Q=next_pow2(d.q_lora), BLOCK_KV=next_pow2(d.kv_lora),
        BLOCK_HALF=max(2, next_pow2(half)), BLOCK_IDX=next_pow2(d.idx_dim), EMULATE=INTERPRET,
        num_warps=tunables.get("mla.prep.num_warps"),
    )
