"""moe.experts: the routed experts of this rank on MXFP4 weights (w4a16), pair-indexed output.

For every pair ``p = row * top_k + slot`` whose expert ``e = ids[row, slot]`` is local
(``expert_first <= e < expert_first + n_local``; ``le = e - expert_first``)::

    h = situ(x[row] . W1[le, :I]^T, x[row] . W1[le, I:]^T)   (bf16)
    y[p] = h . W2[le]^T                                       (bf16)

Shapes (per rank): ``x [rows, latent]`` bf16 (may be a strided view), ``ids [rows, top_k]`` int32,
``w1 [n_local, 2I, latent/2]`` uint8 (MXFP4, low nibble = even K element; rows ``[0, I)`` gate,
``[I, 2I)`` up), ``s1 [n_local, 2I, latent/32]`` uint8 e8m0, ``w2 [n_local, latent, I/2]``,
``s2 [n_local, latent, I/32]``, ``y [rows * top_k, latent]`` bf16. Rows of y of non-local pairs
are not written.

Design (four launches, all on static grids sized from shapes, no host sync):

* grouping (group.py): per local expert, its pairs in pair order padded to ``block_m``; an expert
  id per block; the number of blocks in use.
* FC1, grid ``(cdiv(I, fc1_block_n), max_blocks)``: a program gathers its block's x rows
  (``pair // top_k``; padding rows read as zeros), streams the matching ``fc1_block_n`` gate rows
  and up rows of W1 over K = latent, dequantizes in registers, dots on bf16 with f32
  accumulation, applies SiTU in f32 and stores h (bf16) into a sorted-indexed scratch
  ``[max_blocks * block_m, I]`` (padding rows hold situ(0, 0) = 0).
* FC2, grid ``(cdiv(latent, fc2_block_n), max_blocks)``: h rows of the block times W2 tiles over
  K = I; the real rows are stored to y at their pair ids.
Programs whose block is past ``n_blocks`` exit at once.

Dequantization: the weight bytes of a K tile are loaded as ``[K/2, N]`` (contiguous along K),
the low nibbles dot with x's even K columns and the high nibbles with the odd ones, so no
interleave is needed. A nibble becomes its exact bf16 value times ``2**(scale - 127)`` with
integer ops only: for magnitude code ``c`` (e2m1 = e1 e0 m) and ``base = (scale << 7) - 128``,
the bf16 bits are ``base + (c << 6)`` for c >= 2 (exponent ``scale + e - 1``, mantissa m),
``base`` for c = 1 (0.5 = exponent ``scale - 1``), 0 for c = 0, with the sign at bit 15 —
exact for scale in 1..252 (realistic scales are ~110..130; mxfp4_encode never writes below 5;
at 253..254 the largest codes overflow bf16, as their true values do).

Row results do not depend on the block a pair lands in (each row's dot sums the same K tiles in
the same order), so the grouping (block_m) is an implementation detail (tested).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .. import scratch, tunables
from ..platform import INTERPRET, cdiv
from ..rounding import rounded
from .activation import situ_f32
from .group import grouping


@dataclass(frozen=True)
class ExpertTiles:
    block_m: int
    fc1_block_n: int
    fc1_block_k: int
    fc1_num_warps: int
    fc1_num_stages: int
    fc2_block_n: int
    fc2_block_k: int
    fc2_num_warps: int
    fc2_num_stages: int
    group_block_e: int
    group_block_p: int
    group_block_b: int

    @staticmethod
    def from_tunables(**overrides) -> "ExpertTiles":
        names = ExpertTiles.__dataclass_fields__
        values = {n: tunables.get(f"moe.experts.{n}") for n in names}
        values.update(overrides)
        return ExpertTiles(**values)


@triton.jit
def _e2m1_bf16(code, base):
    """``code`` int32 nibble (bit 3 sign, bits 0-2 magnitude code), ``base = (scale << 7) - 128``
    -> bf16 ``e2m1(code) * 2**(scale - 127)``, exact."""
    mag = code & 7
    bits = tl.where(mag < 2, base * mag, base + (mag << 6)) | ((code & 8) << 12)
    return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _mxfp4_tile(w_ptrs, s_ptrs, mask, s_mask, HALF: tl.constexpr, GROUPS: tl.constexpr,
                BLOCK_N: tl.constexpr):
    """Load one ``[HALF, BLOCK_N]`` byte tile (K/2 along axis 0) and its ``[GROUPS, BLOCK_N]`` scales
    -> (even-K values, odd-K values), bf16 ``[HALF, BLOCK_N]`` each. Masked bytes decode to 0."""
    byte = tl.load(w_ptrs, mask=mask, other=0).to(tl.int32)
    scale = tl.load(s_ptrs, mask=s_mask, other=127).to(tl.int32)
    base = (scale << 7) - 128
    base = tl.reshape(tl.broadcast_to(base[:, None, :], (GROUPS, 16, BLOCK_N)), (HALF, BLOCK_N))
    return _e2m1_bf16(byte & 15, base), _e2m1_bf16(byte >> 4, base)


@triton.jit
def _fc1_kernel(x_ptr, x_rs, w1_ptr, w1_es, w1_ns, s1_ptr, s1_es, s1_ns, h_ptr,
                sorted_ptr, block_expert_ptr, n_blocks_ptr,
                n_pairs, inter, latent,
                TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr, RNE: tl.constexpr):
    blk = tl.program_id(1)
    if blk >= tl.load(n_blocks_ptr):
        return
    le = tl.load(block_expert_ptr + blk).to(tl.int64)
    m = tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + blk * BLOCK_M + m)
    live = pair < n_pairs
    x_rows = x_ptr + tl.where(live, pair // TOP_K, 0).to(tl.int64) * x_rs
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < inter
    j = tl.arange(0, BLOCK_K // 2)  # byte (K pair) within the K tile
    g = tl.arange(0, BLOCK_K // 32)  # scale group within the K tile
    gate_w = w1_ptr + le * w1_es + n[None, :] * w1_ns
    up_w = gate_w + inter * w1_ns
    gate_s = s1_ptr + le * s1_es + n[None, :] * s1_ns
    up_s = gate_s + inter * s1_ns
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    k_bytes = latent // 2
    k_groups = latent // 32
    for k0 in range(0, latent, BLOCK_K):
        kb = k0 // 2 + j
        kb_ok = kb < k_bytes
        kg = k0 // 32 + g
        x_mask = live[:, None] & kb_ok[None, :]
        xe = tl.load(x_rows[:, None] + 2 * kb[None, :], mask=x_mask, other=0.0)
        xo = tl.load(x_rows[:, None] + 2 * kb[None, :] + 1, mask=x_mask, other=0.0)
        w_mask = kb_ok[:, None] & n_ok[None, :]
        s_mask = (kg < k_groups)[:, None] & n_ok[None, :]
        ge, go = _mxfp4_tile(gate_w + kb[:, None], gate_s + kg[:, None], w_mask, s_mask,
                             BLOCK_K // 2, BLOCK_K // 32, BLOCK_N)
        ue, uo = _mxfp4_tile(up_w + kb[:, None], up_s + kg[:, None], w_mask, s_mask,
                             BLOCK_K // 2, BLOCK_K // 32, BLOCK_N)
        if DOT_F32:
            xe, xo = xe.to(tl.float32), xo.to(tl.float32)
            ge, go = ge.to(tl.float32), go.to(tl.float32)
            ue, uo = ue.to(tl.float32), uo.to(tl.float32)
        acc_g = tl.dot(xe, ge, acc_g)
        acc_g = tl.dot(xo, go, acc_g)
        acc_u = tl.dot(xe, ue, acc_u)
        acc_u = tl.dot(xo, uo, acc_u)
    h = situ_f32(acc_g, acc_u)
    h_rows = (blk * BLOCK_M + m).to(tl.int64) * inter
    tl.store(h_ptr + h_rows[:, None] + n[None, :], rounded(h, h_ptr.dtype.element_ty, RNE),
             mask=n_ok[None, :])


@triton.jit
def _fc2_kernel(h_ptr, w2_ptr, w2_es, w2_ns, s2_ptr, s2_es, s2_ns, y_ptr, y_rs,
                sorted_ptr, block_expert_ptr, n_blocks_ptr,
                n_pairs, inter, latent,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                DOT_F32: tl.constexpr, RNE: tl.constexpr):
    blk = tl.program_id(1)
    if blk >= tl.load(n_blocks_ptr):
        return
    le = tl.load(block_expert_ptr + blk).to(tl.int64)
    m = tl.arange(0, BLOCK_M)
    h_rows = h_ptr + (blk * BLOCK_M + m).to(tl.int64) * inter
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < latent
    j = tl.arange(0, BLOCK_K // 2)  # byte (K pair) within the K tile
    g = tl.arange(0, BLOCK_K // 32)  # scale group within the K tile
    w_cols = w2_ptr + le * w2_es + n[None, :] * w2_ns
    s_cols = s2_ptr + le * s2_es + n[None, :] * s2_ns
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    k_bytes = inter // 2
    k_groups = inter // 32
    for k0 in range(0, inter, BLOCK_K):
        kb = k0 // 2 + j
        kb_ok = kb < k_bytes
        kg = k0 // 32 + g
        he = tl.load(h_rows[:, None] + 2 * kb[None, :], mask=kb_ok[None, :], other=0.0)
        ho = tl.load(h_rows[:, None] + 2 * kb[None, :] + 1, mask=kb_ok[None, :], other=0.0)
        we, wo = _mxfp4_tile(w_cols + kb[:, None], s_cols + kg[:, None],
                             kb_ok[:, None] & n_ok[None, :], (kg < k_groups)[:, None] & n_ok[None, :],
                             BLOCK_K // 2, BLOCK_K // 32, BLOCK_N)
        if DOT_F32:
            he, ho = he.to(tl.float32), ho.to(tl.float32)
            we, wo = we.to(tl.float32), wo.to(tl.float32)
        acc = tl.dot(he, we, acc)
        acc = tl.dot(ho, wo, acc)
    pair = tl.load(sorted_ptr + blk * BLOCK_M + m)
    live = pair < n_pairs
    y_rows = tl.where(live, pair, 0).to(tl.int64) * y_rs
    tl.store(y_ptr + y_rows[:, None] + n[None, :], rounded(acc, y_ptr.dtype.element_ty, RNE),
             mask=live[:, None] & n_ok[None, :])


def run_experts(sh, tiles: ExpertTiles, *, x: torch.Tensor, ids: torch.Tensor, w1: torch.Tensor,
                s1: torch.Tensor, w2: torch.Tensor, s2: torch.Tensor, y: torch.Tensor) -> None:
    """moe.experts with explicit tiles (the op entry point reads them from the tunables)."""
    rows, top_k = ids.shape
    n_local, two_inter, latent_half = w1.shape
    inter, latent = two_inter // 2, 2 * latent_half
    assert sh.dims.mxfp4_group == 32 and n_local == sh.experts and inter == sh.expert_inter
    assert x.shape == (rows, latent) and y.shape == (rows * top_k, latent)
    assert s1.shape == (n_local, two_inter, latent // 32)
    assert w2.shape == (n_local, latent, inter // 2) and s2.shape == (n_local, latent, inter // 32)
    for t in (x, ids, w1, s1, w2, s2, y):
        assert t.stride(-1) == 1, "last dims must be contiguous"
    assert w1.stride(1) == latent_half and s1.stride(1) == latent // 32  # rows of one expert packed
    for bk in (tiles.fc1_block_k, tiles.fc2_block_k):
        assert bk % 32 == 0
    n_pairs = rows * top_k
    if n_pairs == 0:
        return
    grp = grouping(x.device, n_pairs, n_local, tiles.block_m)
    grp.build(ids, sh.expert_first, block_e=tiles.group_block_e, block_p=tiles.group_block_p,
              block_b=tiles.group_block_b)
    h = scratch.empty("moe.experts.h", x.device, (grp.max_blocks * tiles.block_m, inter), torch.bfloat16)
    _fc1_kernel[(cdiv(inter, tiles.fc1_block_n), grp.max_blocks)](
        x, x.stride(0), w1, w1.stride(0), w1.stride(1), s1, s1.stride(0), s1.stride(1), h,
        grp.sorted_pairs, grp.block_expert, grp.n_blocks, n_pairs, inter, latent,
        TOP_K=top_k, BLOCK_M=tiles.block_m, BLOCK_N=tiles.fc1_block_n, BLOCK_K=tiles.fc1_block_k,
        DOT_F32=INTERPRET, RNE=INTERPRET, num_warps=tiles.fc1_num_warps, num_stages=tiles.fc1_num_stages)
    _fc2_kernel[(cdiv(latent, tiles.fc2_block_n), grp.max_blocks)](
        h, w2, w2.stride(0), w2.stride(1), s2, s2.stride(0), s2.stride(1), y, y.stride(0),
        grp.sorted_pairs, grp.block_expert, grp.n_blocks, n_pairs, inter, latent,
        BLOCK_M=tiles.block_m, BLOCK_N=tiles.fc2_block_n, BLOCK_K=tiles.fc2_block_k,
        DOT_F32=INTERPRET, RNE=INTERPRET, num_warps=tiles.fc2_num_warps, num_stages=tiles.fc2_num_stages)


def moe_experts(sh, *, x: torch.Tensor, ids: torch.Tensor, w1: torch.Tensor, s1: torch.Tensor,
                w2: torch.Tensor, s2: torch.Tensor, y: torch.Tensor) -> None:
    run_experts(sh, ExpertTiles.from_tunables(), x=x, ids=ids, w1=w1, s1=s1, w2=w2, s2=s2, y=y)
