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

Design (five launches, all on static grids sized from shapes, no host sync). Decode is
memory-bound on the weights (4.4 MB per touched expert at the published shapes), so every
program streams one weight tile per K step and keeps the integer work per weight byte small:

* grouping (group.py): per local expert, its pairs in pair order padded to ``block_m``; an expert
  id per block; the number of blocks in use.
* permute, grid ``(rows, KP / 128)``: x copied to a scratch ``xp [rows, KP]`` with the columns of
  every 128-column tile in the *dot order* (below); ``KP`` is latent rounded up to 128 (zeros
  past it).
* FC1, grid ``(cdiv(I, fc1_block_n), max_blocks)``: the program's ``fc1_block_n`` gate rows and
  up rows of W1, one tile of ``2 fc1_block_n`` rows, are the MMA's A operand (registers); its
  block's xp rows (``pair // top_k``, padding pairs as zeros) are the B operand. The weights go
  from 16-byte loads straight into the tensor-core registers (a Hopper wgmma ``m64 n16``:
  weight rows are M, the block's pairs N). SiTU in f32 on the accumulators; h (bf16) is stored
  into ``hs [max_blocks * block_m, KP2]``, in FC2's dot order.
* FC2, grid ``(cdiv(latent, fc2_block_n), max_blocks)``: W2 rows as A, the block's hs rows as B;
  the real rows are stored to y at their pair ids.
Programs whose block is past ``n_blocks`` exit at once. A K loop step loads ``k_tiles`` tiles of
128 values (whole 128-byte lines of every weight row from 2 on) and triton's pipeliner keeps
``num_stages`` steps in flight.

The dot order. A K tile is 128 values, 16 little-endian uint32 words per weight row. Thread
lane ``c = lane % 4`` loads words ``4c .. 4c+3`` of its rows (one scale group, so one scale
per thread and row; when K is a multiple of 128 the tile's four scales are one aligned uint32
per row, which the row's four lanes read in the MMA's layout) and decodes each word into four
bf16 pairs, pair ``j`` holding nibbles ``j`` and ``j + 4``. The MMA only needs every thread's
registers to hold the K positions its layout expects, and a dot product does not depend on
the order of K, so the tile's K axis is *relabeled* instead of moved: logical position
``L = 32q + 16jx + 8jy + 2c + h`` holds physical value ``32c + 8q + 4h + 2jx + jy`` (word ``q``
of the thread, nibble ``jy + 2jx + 4h`` of it). The activations are stored in that order once
(xp by the permute, hs by FC1), the weights are read as stored. Weight rows are relabeled too
(triton's load layout puts rows ``8w .. 8w+7`` and ``8W + 8w ..`` in warp ``w``; the MMA wants
rows ``16w .. 16w+15``): each loaded row points at the weight row its decoded row stands for.
Whether triton keeps A in registers (no shared-memory round trip) is a property of the
compiled code: checked on triton 3.6 for sm_90 (every tunable choice), not by the tests.

Dequantization, three integer operations (mask, multiply, mask; see _bf16_pairs) and two
packed multiplies per pair of values. The K loop issues about 31 instructions per weight word
on sm_90 (triton 3.6), close to what an SM can issue at the HBM rate, so every operation per
pair counts. A nibble (sign s, magnitude code c) becomes the bf16 bits ``s << 15 | c << 6``,
which read as ``e2m1(c) * 2**-126`` (the e2m1 subnormal code 1 falls on a bf16 subnormal),
exactly; times ``2**126`` and times ``2**(scale - 127)`` (bf16 bits ``scale << 7``) gives the
weight value, exactly for scales 1..252 (bf16 and f32 both overflow above, as the true values
do).

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

TILE_K = 128  # K values per tile: 16 words per weight row, 4 per lane
TWO_126 = tl.constexpr(2.0 ** 126)  # exact in bf16


@dataclass(frozen=True)
class ExpertTiles:
    block_m: int
    fc1_block_n: int
    fc1_k_tiles: int
    fc1_num_stages: int
    fc2_block_n: int
    fc2_k_tiles: int
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


# ------------------------------------------------------------------------- the dot order
@triton.jit
def _dot_to_physical(L):
    """Logical K position within a 128-tile -> the physical value it holds."""
    h = L & 1
    c = (L >> 1) & 3
    jy = (L >> 3) & 1
    jx = (L >> 4) & 1
    q = (L >> 5) & 3
    return 32 * c + 8 * q + 4 * h + 2 * jx + jy


@triton.jit
def _physical_to_dot(p):
    """Physical value within a 128-tile -> its logical K position (inverse of the above)."""
    jy = p & 1
    jx = (p >> 1) & 1
    h = (p >> 2) & 1
    q = (p >> 3) & 3
    c = (p >> 5) & 3
    return 32 * q + 16 * jx + 8 * jy + 2 * c + h


@triton.jit
def _decoded_row(i, W: tl.constexpr):
    """Row ``i`` of a ``[16W, 16]`` word tile as loaded -> its row in the decoded tile. Triton
    loads the word tile with rows ``8w .. 8w+7`` and ``8W + 8w .. 8W + 8w+7`` in warp ``w``; the
    MMA's operand wants rows ``16w .. 16w+15`` there. The launchers point loaded row ``i`` at
    the weight row that decoded row ``_decoded_row(i)`` stands for, so results come out in
    row order."""
    return 16 * ((i // 8) % W) + 8 * (i // (8 * W)) + i % 8


@triton.jit
def _bf16_pairs(v):
    """uint32 words -> four uint32 tensors of bf16 pairs; pair j holds nibbles j (low half) and
    j + 4 (high half) as ``s << 15 | c << 6`` (= e2m1 * 2**-126). A pair is three operations:
    its two nibbles masked in place (at bits b and b + 16, b = 0 or 4), one multiply by
    ``2**(6-b) + 2**(12-b)`` that adds a copy of each nibble with c at bits 6..8 to one with s at
    bit 15 (the copies' bits do not overlap: no carries), and a mask that keeps those bits."""
    w = v >> 8
    p0 = ((v & 0x000F000F) * 4160) & 0x81C081C0
    p1 = ((v & 0x00F000F0) * 260) & 0x81C081C0
    p2 = ((w & 0x000F000F) * 4160) & 0x81C081C0
    p3 = ((w & 0x00F000F0) * 260) & 0x81C081C0
    return p0, p1, p2, p3


@triton.jit
def _halves(p, F32: tl.constexpr):
    """The two bf16 of each pair, as bf16, or (F32) as the same values in f32: the interpreter
    flushes bf16 subnormals and computes bf16 products wrongly, f32 it gets right."""
    if F32:
        lo = (p << 16).to(tl.float32, bitcast=True)
        hi = (p & 0xFFFF0000).to(tl.float32, bitcast=True)
    else:
        lo = (p & 0xFFFF).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        hi = (p >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return lo, hi


@triton.jit
def _decode_tile(v, scale, W: tl.constexpr, F32: tl.constexpr):
    """``v [16W, 16]`` uint32 words (row, word 4c + q) and ``scale [16W, 4]`` uint32 (the e8m0
    scale of row and lane c) -> ``[16W, 128]`` weights (bf16, or with F32 the same values in
    f32), rows in decoded order (see _decoded_row), K in dot order."""
    R: tl.constexpr = 16 * W
    p0, p1, p2, p3 = _bf16_pairs(v)
    a0, a1 = _halves(p0, F32)
    b0, b1 = _halves(p1, F32)
    c0, c1 = _halves(p2, F32)
    d0, d1 = _halves(p3, F32)
    if F32:
        mult = (scale << 23).to(tl.float32, bitcast=True)
    else:
        mult = (scale << 7).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    # [row, word, h, jy, jx]: pair j = jy + 2 jx holds nibbles j (h = 0) and j + 4 (h = 1)
    t = tl.join(tl.join(tl.join(a0, a1), tl.join(b0, b1)), tl.join(tl.join(c0, c1), tl.join(d0, d1)))
    t = tl.reshape(t, (R, 4, 4, 2, 2, 2))  # [row, c, q, h, jy, jx]
    t = t * TWO_126
    t = t * tl.reshape(mult, (R, 4, 1, 1, 1, 1))
    t = tl.reshape(t, (2, W, 8, 4, 4, 2, 2, 2))  # loaded row = 8W b + 8w + r
    t = tl.permute(t, (1, 0, 2, 4, 7, 6, 3, 5))  # [w, b, r, q, jx, jy, c, h]
    return tl.reshape(t, (R, 128))


@triton.jit
def _tile_scales(s_rows, k0, n_ok, k_groups, EVEN_K: tl.constexpr):
    """The e8m0 scales of the K tile at ``k0``: ``[R, 1]`` uint32 words, byte c for lane c
    (EVEN_K: one aligned word per row), else ``[R, 4]`` bytes (zero where masked).
    ``s_rows [R, 1]`` points at each row's scales."""
    if EVEN_K:
        words = s_rows.to(tl.pointer_type(tl.uint32), bitcast=True)
        sc = tl.load(words + k0 // 128, mask=n_ok, other=0)
    else:
        g = k0 // 32 + tl.arange(0, 4)[None, :]
        sc = tl.load(s_rows + g, mask=n_ok & (g < k_groups), other=0).to(tl.uint32)
    return sc


@triton.jit
def _lane_scales(sc, EVEN_K: tl.constexpr):
    if EVEN_K:
        sc = (sc >> (8 * tl.arange(0, 4)[None, :])) & 0xFF
    return sc


@triton.jit
def _weight_words(w_rows, k0, n_ok, k_words, EVEN_K: tl.constexpr):
    """The K tile at ``k0`` of rows ``w_rows [R, 1]`` (uint32 pointers): ``[R, 16]`` words."""
    kw = k0 // 8 + tl.arange(0, 16)[None, :]
    if EVEN_K:
        return tl.load(w_rows + kw, mask=n_ok, other=0)
    return tl.load(w_rows + kw, mask=n_ok & (kw < k_words), other=0)


@triton.jit
def _tile_mma(acc, v, sc, xt, W: tl.constexpr, EVEN_K: tl.constexpr, DOT_F32: tl.constexpr):
    a = _decode_tile(v, _lane_scales(sc, EVEN_K), W, DOT_F32)
    if DOT_F32:
        xt = xt.to(tl.float32)
    return tl.dot(a, xt, acc)


@triton.jit
def _stream(w_rows, s_rows, n_ok, act, act_ok, K, BLOCK_M: tl.constexpr, W: tl.constexpr,
            K_TILES: tl.constexpr, EVEN_K: tl.constexpr, DOT_F32: tl.constexpr):
    """``sum_k W[row, k] act[k, m]`` over K for the ``16 W`` weight rows ``w_rows`` (uint32
    pointers ``[16W, 1]``; scales ``s_rows``) and the activation tile pointers ``act [128, M]``
    (dot order; columns where ``act_ok [1, M]`` is false read as zero) -> f32 ``[16W, M]``,
    rows in decoded order. A loop step loads K_TILES consecutive 128-value tiles before
    decoding any, so each weight row is read ``64 * K_TILES`` contiguous bytes at a time (whole
    128-byte lines from K_TILES = 2: HBM serves those at a higher rate than half lines); K must
    be a multiple of ``128 * K_TILES`` (the launcher's choice)."""
    acc = tl.zeros([16 * W, BLOCK_M], tl.float32)
    k_words = K // 8
    k_groups = K // 32
    for k0 in range(0, K, 128 * K_TILES):
        v0 = _weight_words(w_rows, k0, n_ok, k_words, EVEN_K)
        s0 = _tile_scales(s_rows, k0, n_ok, k_groups, EVEN_K)
        x0 = tl.load(act + k0, mask=act_ok, other=0.0)
        if K_TILES >= 2:
            v1 = _weight_words(w_rows, k0 + 128, n_ok, k_words, EVEN_K)
            s1 = _tile_scales(s_rows, k0 + 128, n_ok, k_groups, EVEN_K)
            x1 = tl.load(act + k0 + 128, mask=act_ok, other=0.0)
        if K_TILES >= 4:
            v2 = _weight_words(w_rows, k0 + 256, n_ok, k_words, EVEN_K)
            s2 = _tile_scales(s_rows, k0 + 256, n_ok, k_groups, EVEN_K)
            x2 = tl.load(act + k0 + 256, mask=act_ok, other=0.0)
            v3 = _weight_words(w_rows, k0 + 384, n_ok, k_words, EVEN_K)
            s3 = _tile_scales(s_rows, k0 + 384, n_ok, k_groups, EVEN_K)
            x3 = tl.load(act + k0 + 384, mask=act_ok, other=0.0)
        acc = _tile_mma(acc, v0, s0, x0, W, EVEN_K, DOT_F32)
        if K_TILES >= 2:
            acc = _tile_mma(acc, v1, s1, x1, W, EVEN_K, DOT_F32)
        if K_TILES >= 4:
            acc = _tile_mma(acc, v2, s2, x2, W, EVEN_K, DOT_F32)
            acc = _tile_mma(acc, v3, s3, x3, W, EVEN_K, DOT_F32)
    return acc


# ------------------------------------------------------------------------------ kernels
@triton.jit
def _permute_kernel(x_ptr, x_rs, xp_ptr, xp_rs, latent):
    """Program (row, t): xp[row, 128t + L] = x[row, 128t + phys(L)] (zero past latent)."""
    row = tl.program_id(0).to(tl.int64)
    L = tl.arange(0, 128)
    col = tl.program_id(1) * 128 + _dot_to_physical(L)
    v = tl.load(x_ptr + row * x_rs + col, mask=col < latent, other=0.0)
    tl.store(xp_ptr + row * xp_rs + tl.program_id(1) * 128 + L, v)


@triton.jit
def _fc1_kernel(xp_ptr, xp_rs, w1_ptr, w1_es, w1_rs, s1_ptr, s1_es, s1_rs, hs_ptr, hs_rs,
                sorted_ptr, block_expert_ptr, n_blocks_ptr, n_pairs, inter, latent,
                TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, W: tl.constexpr,
                K_TILES: tl.constexpr, EVEN_K: tl.constexpr, DOT_F32: tl.constexpr,
                RNE: tl.constexpr):
    """One weight tile of 16 W rows: BLOCK_N = 8 W gate rows, then the matching up rows; the
    block's x rows are read from xp (dot order) at ``pair // top_k``, padding pairs as zeros."""
    BLOCK_N: tl.constexpr = 8 * W
    blk = tl.program_id(1)
    if blk >= tl.load(n_blocks_ptr):
        return
    le = tl.load(block_expert_ptr + blk).to(tl.int64)
    d = _decoded_row(tl.arange(0, 2 * BLOCK_N), W)  # decoded rows: BLOCK_N gate, then up
    n = tl.program_id(0) * BLOCK_N + d % BLOCK_N
    n_ok = (n < inter)[:, None]
    w_row = (n + inter * (d // BLOCK_N)).to(tl.int64)[:, None]  # row of W1 (gate | up)
    w_rows = w1_ptr.to(tl.pointer_type(tl.uint32), bitcast=True) + le * (w1_es // 4) + w_row * (w1_rs // 4)
    s_rows = s1_ptr + le * s1_es + w_row * s1_rs
    m = tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + blk * BLOCK_M + m)
    live = pair < n_pairs
    x_row = tl.where(live, pair // TOP_K, 0).to(tl.int64)
    act = xp_ptr + x_row[None, :] * xp_rs + tl.arange(0, 128)[:, None]  # [128, M]
    acc = _stream(w_rows, s_rows, n_ok, act, live[None, :], latent, BLOCK_M, W, K_TILES, EVEN_K,
                  DOT_F32)
    gu = tl.permute(tl.reshape(acc, (2, BLOCK_N, BLOCK_M)), (1, 2, 0))
    g, u = tl.split(gu)
    h = situ_f32(g, u)
    col = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)  # intermediate columns
    dst = (col // 128) * 128 + _physical_to_dot(col % 128)  # its place in FC2's dot order
    h_rows = (blk * BLOCK_M + m).to(tl.int64)[None, :] * hs_rs
    tl.store(hs_ptr + h_rows + dst[:, None], rounded(h, hs_ptr.dtype.element_ty, RNE),
             mask=(col < inter)[:, None])


@triton.jit
def _fc2_kernel(hs_ptr, hs_rs, w2_ptr, w2_es, w2_rs, s2_ptr, s2_es, s2_rs, y_ptr, y_rs,
                sorted_ptr, block_expert_ptr, n_blocks_ptr, n_pairs, inter, latent,
                BLOCK_M: tl.constexpr, W: tl.constexpr, K_TILES: tl.constexpr,
                EVEN_K: tl.constexpr, DOT_F32: tl.constexpr, RNE: tl.constexpr):
    BLOCK_N: tl.constexpr = 16 * W
    blk = tl.program_id(1)
    if blk >= tl.load(n_blocks_ptr):
        return
    le = tl.load(block_expert_ptr + blk).to(tl.int64)
    n = tl.program_id(0) * BLOCK_N + _decoded_row(tl.arange(0, BLOCK_N), W)
    n_ok = (n < latent)[:, None]
    w_rows = (w2_ptr.to(tl.pointer_type(tl.uint32), bitcast=True) + le * (w2_es // 4)
              + n.to(tl.int64)[:, None] * (w2_rs // 4))
    s_rows = s2_ptr + le * s2_es + n.to(tl.int64)[:, None] * s2_rs
    m = tl.arange(0, BLOCK_M)
    act = hs_ptr + (blk * BLOCK_M + m).to(tl.int64)[None, :] * hs_rs + tl.arange(0, 128)[:, None]
    every = tl.full([1, BLOCK_M], 1, tl.int1)  # hs padding rows hold zeros
    acc = _stream(w_rows, s_rows, n_ok, act, every, inter, BLOCK_M, W, K_TILES, EVEN_K, DOT_F32)
    pair = tl.load(sorted_ptr + blk * BLOCK_M + m)
    live = pair < n_pairs
    col = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    y_rows = tl.where(live, pair, 0).to(tl.int64)[None, :] * y_rs
    tl.store(y_ptr + y_rows + col[:, None], rounded(acc, y_ptr.dtype.element_ty, RNE),
             mask=live[None, :] & (col < latent)[:, None])


# ------------------------------------------------------------------------------ launcher
def _padded(k: int) -> int:
    return cdiv(k, TILE_K) * TILE_K


def k_tiles(k: int, wanted: int) -> int:
    """K tiles per loop step: the largest of ``wanted``, ``wanted / 2``, ... 1 whose step divides
    K (a K that is not a multiple of 128 takes one tile a step, masked)."""
    t = wanted
    while t > 1 and k % (TILE_K * t):
        t //= 2
    return t


def _hs(device, rows: int, inter: int) -> torch.Tensor:
    """FC1's output scratch; its columns past ``inter`` are never written and must read as zero
    (FC2 multiplies them by masked weights), so the buffer is made zeroed, once."""
    shape = (rows, _padded(inter))
    return scratch.cached(("moe.experts.hs", str(device), shape),
                          lambda: torch.zeros(shape, dtype=torch.bfloat16, device=device))


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
    for w in (w1, w2):  # weights are read as uint32 words
        assert w.stride(0) % 4 == 0 and w.stride(1) % 4 == 0 and w.data_ptr() % 4 == 0
    assert w1.stride(1) == latent_half and s1.stride(1) == latent // 32  # rows of one expert packed
    for s, k in ((s1, latent), (s2, inter)):  # a K tile's four scales are read as one uint32
        assert k % TILE_K or (s.stride(0) % 4 == 0 and s.stride(1) % 4 == 0 and s.data_ptr() % 4 == 0)
    n_pairs = rows * top_k
    if n_pairs == 0:
        return
    bm = tiles.block_m
    grp = grouping(x.device, n_pairs, n_local, bm)
    grp.build(ids, sh.expert_first, block_e=tiles.group_block_e, block_p=tiles.group_block_p,
              block_b=tiles.group_block_b)
    KP = _padded(latent)
    xp = scratch.empty("moe.experts.xp", x.device, (rows, KP), torch.bfloat16)
    hs = _hs(x.device, grp.max_blocks * bm, inter)
    _permute_kernel[(rows, KP // TILE_K)](x, x.stride(0), xp, xp.stride(0), latent, num_warps=1)
    # a weight tile is 16 rows per warp (the MMA's operand layout): FC1's 2 * block_n rows, FC2's block_n
    w_fc1, w_fc2 = tiles.fc1_block_n // 8, tiles.fc2_block_n // 16
    _fc1_kernel[(cdiv(inter, tiles.fc1_block_n), grp.max_blocks)](
        xp, xp.stride(0), w1, w1.stride(0), w1.stride(1), s1, s1.stride(0), s1.stride(1),
        hs, hs.stride(0), grp.sorted_pairs, grp.block_expert, grp.n_blocks, n_pairs, inter, latent,
        TOP_K=top_k, BLOCK_M=bm, W=w_fc1, K_TILES=k_tiles(latent, tiles.fc1_k_tiles),
        EVEN_K=latent % TILE_K == 0, DOT_F32=INTERPRET, RNE=INTERPRET, num_warps=w_fc1,
        num_stages=tiles.fc1_num_stages)
    _fc2_kernel[(cdiv(latent, tiles.fc2_block_n), grp.max_blocks)](
        hs, hs.stride(0), w2, w2.stride(0), w2.stride(1), s2, s2.stride(0), s2.stride(1),
        y, y.stride(0), grp.sorted_pairs, grp.block_expert, grp.n_blocks, n_pairs, inter, latent,
        BLOCK_M=bm, W=w_fc2, K_TILES=k_tiles(inter, tiles.fc2_k_tiles), EVEN_K=inter % TILE_K == 0,
        DOT_F32=INTERPRET, RNE=INTERPRET, num_warps=w_fc2, num_stages=tiles.fc2_num_stages)


def moe_experts(sh, *, x: torch.Tensor, ids: torch.Tensor, w1: torch.Tensor, s1: torch.Tensor,
                w2: torch.Tensor, s2: torch.Tensor, y: torch.Tensor) -> None:
    run_experts(sh, ExpertTiles.from_tunables(), x=x, ids=ids, w1=w1, s1=s1, w2=w2, s2=s2, y=y)
