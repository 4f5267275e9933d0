"""mla.sparse_decode: each row's local heads attend over the cache rows its ``idx`` chose.

Design (MLA: every head shares each gathered row, so the row is read once per head block):

* main kernel, grid ``(rows, splits, cdiv(heads, BLOCK_H))`` (under the interpreter one split
  and one block of all K indices, see ``platform.FEW_PROGRAMS``): the program owns indices
  ``[split * CHUNK, (split + 1) * CHUNK)`` of its row and a block of 16 heads (12 local heads at
  full size, padded for ``tl.dot``). It loads the queries once, then walks its chunk
  ``BLOCK_N`` indices at a time: block-table lookup, gather of the fp8 rows (latent and rope
  part) and their scales, ``s = (q_lat . k_lat + q_rope . k_rope) * scale_row * sm_scale``
  (bf16 dots: fp8 -> bf16 is exact, f32 accumulation), an online softmax in base 2, and
  ``acc += p . latent``. ``p * scale_row`` is split into a bf16 high part and a bf16 residual,
  both dotted with the bf16 latent (P_SPLIT; 16 mantissa bits instead of the 8 a single bf16
  ``p`` keeps). The walk stops after the chunk's last valid index (unused ``-1`` slots come
  last); invalid slots inside the walked range are masked, so any arrangement stays correct.
* with one split the main kernel writes ``o_lat`` / ``lse`` directly; with several, each split
  writes a normalized partial ``(o, lse)`` to a scratch buffer (module-level, allocated on the
  first eager call per shape) and a merge kernel, grid ``(rows, heads)``, combines them:
  ``lse = log sum exp(lse_s)``, ``o = sum exp(lse_s - lse) o_s`` (fixed order: deterministic).
* splits are chosen from the shapes only (CUDA-graph safe): enough that ``rows x splits x
  head_blocks`` reaches the ``target_programs`` tunable, the chunk a power-of-two multiple of
  ``BLOCK_N``.

No valid index: ``o_lat = 0``, ``lse = -inf`` (natural log), as the reference.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import platform, scratch, tunables
from ..platform import INTERPRET, cdiv, next_pow2
from ..rounding import rounded

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
BLOCK_H = 16  # tl.dot's smallest M; 12 local heads at full size fit one block

@triton.jit
def _decode_kernel(
    q, q_s0, q_s1, kv, kv_s0, kv_s1, kvs, kvs_s0, kvs_s1, bt, bt_s0, idx, idx_s0,
    o_dst, od_s0, od_s1, od_s2, lse_dst, ld_s0, ld_s1, ld_s2,
    heads, K, qk_scale,
    LORA: tl.constexpr, ROPE: tl.constexpr, PAGE: tl.constexpr, CHUNK: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_R: tl.constexpr, P_SPLIT: tl.constexpr, DOT_F32: tl.constexpr, RNE: tl.constexpr,
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    hb = tl.program_id(2)
    row64 = row.to(tl.int64)
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < heads
    offs_l = tl.arange(0, BLOCK_L)
    mask_l = offs_l < LORA
    offs_r = tl.arange(0, BLOCK_R)
    mask_r = offs_r < ROPE

    q_rows = q + row64 * q_s0 + offs_h[:, None] * q_s1
    q_lat = tl.load(q_rows + offs_l[None, :], mask=mask_h[:, None] & mask_l[None, :], other=0.0)
    q_rope = tl.load(q_rows + LORA + offs_r[None, :], mask=mask_h[:, None] & mask_r[None, :],
                     other=0.0)
    if DOT_F32:  # the interpreter's bf16 dot is wrong; f32 of bf16 values is exact
        q_lat = q_lat.to(tl.float32)
        q_rope = q_rope.to(tl.float32)
    else:
        q_lat = q_lat.to(tl.bfloat16)
        q_rope = q_rope.to(tl.bfloat16)

    # Walk only up to the chunk's last valid index (unused slots trail).
    start = split * CHUNK
    offs_c = tl.arange(0, CHUNK)
    in_k = (start + offs_c) < K
    chunk_idx = tl.load(idx + row64 * idx_s0 + start + offs_c, mask=in_k, other=-1)
    used = tl.max(tl.where(chunk_idx >= 0, offs_c + 1, 0), axis=0)

    m_i = tl.full((BLOCK_H,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_H,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_H, BLOCK_L), dtype=tl.float32)
    bt_row = bt + row64 * bt_s0
    for n0 in range(0, used, BLOCK_N):
        offs_n = start + n0 + tl.arange(0, BLOCK_N)
        t = tl.load(idx + row64 * idx_s0 + offs_n, mask=offs_n < K, other=-1)
        valid = t >= 0
        t = tl.maximum(t, 0)
        page = tl.load(bt_row + t // PAGE, mask=valid, other=0).to(tl.int64)
        off = (t % PAGE).to(tl.int64)
        sc = tl.load(kvs + page * kvs_s0 + off * kvs_s1, mask=valid, other=0.0)
        krow = kv + page * kv_s0 + off * kv_s1
        k_lat = tl.load(krow[:, None] + offs_l[None, :], mask=valid[:, None] & mask_l[None, :],
                        other=0.0)
        k_rope = tl.load(krow[:, None] + LORA + offs_r[None, :],
                         mask=valid[:, None] & mask_r[None, :], other=0.0)
        if DOT_F32:
            k_lat = k_lat.to(tl.float32)
            k_rope = k_rope.to(tl.float32)
        else:
            k_lat = k_lat.to(tl.bfloat16)  # exact: every e4m3 value is a bf16 value
            k_rope = k_rope.to(tl.bfloat16)
        s = tl.dot(q_lat, tl.trans(k_lat))
        s = tl.dot(q_rope, tl.trans(k_rope), s)
        s = s * (sc * qk_scale)[None, :]  # log2 domain: qk_scale = sm_scale * log2(e)
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a block with no valid slot
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        pw = p * sc[None, :]  # the row scale of the value (fp8 latent x scale)
        p_hi = rounded(pw, tl.bfloat16, RNE)
        acc = acc * alpha[:, None]  # rescale, then accumulate in place (one live f32 tile)
        if DOT_F32:
            acc = tl.dot(p_hi.to(tl.float32), k_lat, acc)
            if P_SPLIT:
                p_lo = rounded(pw - p_hi.to(tl.float32), tl.bfloat16, RNE)
                acc = tl.dot(p_lo.to(tl.float32), k_lat, acc)
        else:
            acc = tl.dot(p_hi, k_lat, acc)
            if P_SPLIT:
                p_lo = rounded(pw - p_hi.to(tl.float32), tl.bfloat16, RNE)
                acc = tl.dot(p_lo, k_lat, acc)
        m_i = m_new

    has = l_i > 0.0
    l_safe = tl.where(has, l_i, 1.0)
    o = acc / l_safe[:, None]
    lse = tl.where(has, (m_i + tl.log2(l_safe)) * 0.6931471805599453, float("-inf"))
    o_ptr = o_dst + row64 * od_s0 + split * od_s1 + offs_h[:, None] * od_s2 + offs_l[None, :]
    tl.store(o_ptr, o, mask=mask_h[:, None] & mask_l[None, :])
    tl.store(lse_dst + row64 * ld_s0 + split * ld_s1 + offs_h * ld_s2, lse, mask=mask_h)


@triton.jit
def _merge_kernel(
    o_part, lse_part, o_lat, o_s0, o_s1, lse, l_s0, l_s1, heads, splits,
    LORA: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Partials are contiguous ``[rows, splits, heads, LORA]`` / ``[rows, splits, heads]``."""
    row = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    mask_s = offs_s < splits
    part = row * splits + offs_s  # [BLOCK_S] (row, split) index
    ls = tl.load(lse_part + part * heads + h, mask=mask_s, other=float("-inf"))
    mx = tl.max(ls, axis=0)
    mx_use = tl.where(mx == float("-inf"), 0.0, mx)
    w = tl.exp(ls - mx_use)
    tot = tl.sum(w, axis=0)
    has = tot > 0.0
    tot_safe = tl.where(has, tot, 1.0)
    w = w / tot_safe
    tl.store(lse + row * l_s0 + h * l_s1, tl.where(has, mx_use + tl.log(tot_safe), float("-inf")))
    base = o_part + (part * heads + h)[:, None] * LORA
    for c0 in range(0, LORA, BLOCK_C):
        offs_c = c0 + tl.arange(0, BLOCK_C)
        mask_c = offs_c < LORA
        tile = tl.load(base + offs_c[None, :], mask=mask_s[:, None] & mask_c[None, :], other=0.0)
        tl.store(o_lat + row * o_s0 + h * o_s1 + offs_c, tl.sum(tile * w[:, None], axis=0),
                 mask=mask_c)


def _plan(rows: int, head_blocks: int, k: int, block_n: int, target: int) -> tuple[int, int]:
    """(chunk, splits) from shapes only: enough programs for ``target``, chunk a power-of-two
    multiple of ``block_n``."""
    want = max(1, cdiv(target, rows * head_blocks))
    chunk = max(block_n, next_pow2(cdiv(k, want)))
    return chunk, max(1, cdiv(k, chunk))  # >= 1 so that every output is written, even K = 0


def mla_sparse_decode(sh, *, q_full, kv_cache, kv_scale, block_table, idx, o_lat, lse) -> None:
    """Launcher (contract ``mla.sparse_decode``): ``q_full [rows, heads, cache_row]`` bf16,
    ``kv_cache [pages, page_size, cache_row]`` fp8, ``kv_scale [pages, page_size]`` f32,
    ``block_table [rows, max_pages]`` int32, ``idx [rows, K]`` int32 local tokens (-1 unused)
    -> ``o_lat [rows, heads, kv_lora]`` f32, ``lse [rows, heads]`` f32."""
    d = sh.dims
    rows, heads = q_full.shape[0], q_full.shape[1]
    if rows == 0:
        return
    k = idx.shape[1]
    assert q_full.stride(2) == 1 and kv_cache.stride(2) == 1 and idx.stride(1) == 1
    assert o_lat.stride(2) == 1
    head_blocks = cdiv(heads, BLOCK_H)
    if platform.FEW_PROGRAMS:  # interpreter: one split, all K indices of a row in one block
        block_n = chunk = max(16, next_pow2(k))
        splits = 1
    else:
        block_n = tunables.get("mla.sparse_decode.block_n")
        chunk, splits = _plan(rows, head_blocks, k, block_n,
                              tunables.get("mla.sparse_decode.target_programs"))
    if splits == 1:
        o_dst, od = o_lat, (o_lat.stride(0), 0, o_lat.stride(1))
        lse_dst, ld = lse, (lse.stride(0), 0, lse.stride(1))
    else:
        o_dst = scratch.empty("mla.sparse_decode.o_part", q_full.device,
                              (rows, splits, heads, d.kv_lora), torch.float32)
        lse_dst = scratch.empty("mla.sparse_decode.lse_part", q_full.device, (rows, splits, heads),
                                torch.float32)
        od = (o_dst.stride(0), o_dst.stride(1), o_dst.stride(2))
        ld = (lse_dst.stride(0), lse_dst.stride(1), lse_dst.stride(2))
    sm_scale = d.q_head_dim ** -0.5
    _decode_kernel[(rows, splits, head_blocks)](
        q_full, q_full.stride(0), q_full.stride(1), kv_cache, kv_cache.stride(0),
        kv_cache.stride(1), kv_scale, kv_scale.stride(0), kv_scale.stride(1),
        block_table, block_table.stride(0), idx, idx.stride(0),
        o_dst, *od, lse_dst, *ld,
        heads, k, sm_scale * LOG2E,
        LORA=d.kv_lora, ROPE=d.rope_dim, PAGE=d.page_size, CHUNK=chunk, BLOCK_N=block_n,
        BLOCK_H=BLOCK_H, BLOCK_L=max(16, next_pow2(d.kv_lora)),
        BLOCK_R=max(16, next_pow2(d.rope_dim)), P_SPLIT=tunables.get("mla.sparse_decode.p_split"),
        DOT_F32=INTERPRET, RNE=INTERPRET,
        num_warps=tunables.get("mla.sparse_decode.num_warps"),
        num_stages=tunables.get("mla.sparse_decode.num_stages"),
    )
    if splits > 1:
        _merge_kernel[(rows, heads)](
            o_dst, lse_dst, o_lat, o_lat.stride(0), o_lat.stride(1), lse, lse.stride(0),
            lse.stride(1), heads, splits,
            LORA=d.kv_lora, BLOCK_S=max(2, next_pow2(splits)),
            BLOCK_C=min(tunables.get("mla.sparse_decode.merge_block_c"),
                        max(16, next_pow2(d.kv_lora))),
        )
