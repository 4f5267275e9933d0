"""Exact top-K of the indexer logits (``mla.topk``), K = ``dims.idx_topk``.

For each row: the K largest of ``logits[r, :ctx_len[r]]``, ties broken by the lower token
index, written in ascending token order to ``idx [rows, K]`` (int32), ``-1`` in unused slots;
when ``ctx_len <= K`` every token ``0..ctx_len-1`` is chosen. Bit-exact with the reference.

Design: one program per row, looping over the row in blocks of ``BLOCK`` (no sort; under the
interpreter a block spans the row's whole capacity and digits are 8 bits, see
``platform.FEW_PROGRAMS``):

1. Key: the f32 value as an order-preserving integer (``-0.0`` canonicalized to ``+0.0`` so the
   two zeros tie, as they do in the reference's sort). ``skey`` orders as signed int32;
   ``ukey = skey ^ 0x80000000`` orders as unsigned and is used for the radix digits.
2. Radix select, most significant digit first, ``RADIX_BITS`` per pass (32 / RADIX_BITS
   passes): among the elements whose higher digits equal the prefix found so far, count per
   digit value ``j`` how many have digit >= j (a ``[BLOCK, 2**RADIX_BITS]`` compare accumulated
   in registers, summed across lanes once per pass); the prefix's next digit is the largest
   ``j`` whose count still reaches ``k_rem``; the elements above it are certainly chosen, so
   ``k_rem`` drops by their count. At the end the threshold is the K-th largest key and
   ``k_rem`` the number of its ties to take (lowest index first). The passes stop early once
   exactly ``k_rem`` elements match the prefix (all of them are chosen; the prefix with its
   undecided bits at zero then serves as the threshold).
3. Compaction in index order: chosen = key > threshold, or key == threshold and the tie's rank
   (an exclusive ``tl.cumsum`` carried across blocks) < ``k_rem``; a second exclusive cumsum
   gives each chosen token its output slot, so the output is ascending by construction.
4. Slots ``min(ctx_len, K) .. K-1`` get ``-1``.

Everything is counting on integers, so the result is deterministic and graph capturable
(a static grid of ``rows`` programs, loops bounded by the on-device ``ctx_len``).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import platform
from ..platform import next_pow2
from ..tunables import get


@triton.jit
def _signed_key(v):
    """f32 -> int32 whose signed order is the float order (-0.0 == +0.0)."""
    v = tl.where(v == 0.0, 0.0, v)
    b = v.to(tl.int32, bitcast=True)
    return b ^ ((b >> 31) & 0x7FFFFFFF)


@triton.jit
def _topk_kernel(
    logits_ptr, ctx_ptr, out_ptr, l_s0, l_s1, out_s0, cap,
    K: tl.constexpr, BLOCK: tl.constexpr, RADIX_BITS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    n = tl.minimum(tl.load(ctx_ptr + row).to(tl.int32), cap)
    src = logits_ptr + row * l_s0
    dst = out_ptr + row * out_s0
    offs = tl.arange(0, BLOCK)
    NB: tl.constexpr = 1 << RADIX_BITS
    bins = tl.arange(0, NB)
    sign_bit = tl.full([], 1, tl.int32) << 31

    # Every key above the threshold is chosen, and the first k_rem keys equal to it (by token
    # index). With n <= K the threshold is the smallest key and k_rem = K >= n: all are chosen.
    threshold = sign_bit
    k_rem = tl.full([], K, tl.int32)
    if n > K:
        prefix = tl.full([], 0, tl.int32)  # unsigned-order key bits decided so far
        matching = n  # elements whose decided bits equal the prefix
        for p in tl.static_range(32 // RADIX_BITS):
            shift = 32 - (p + 1) * RADIX_BITS  # compile time (p and RADIX_BITS are)
            # Once exactly k_rem elements match the prefix they are all chosen, so the passes
            # stop: with the undecided bits left at zero the threshold is <= each of them, and
            # those equal to it number at most k_rem, so the compaction takes them all.
            if matching > k_rem:
                # per (lane, j): matching elements with digit >= j; summed over lanes once
                # per pass, so the loop itself needs no cross-thread reduction
                acc = tl.zeros([BLOCK, NB], tl.int32)
                for start in range(0, n, BLOCK):
                    t = start + offs
                    valid = t < n
                    v = tl.load(src + t * l_s1, mask=valid, other=0.0)
                    u = _signed_key(v) ^ sign_bit
                    digit = (u >> shift) & (NB - 1)
                    if p == 0:
                        match = valid
                    else:
                        match = valid & (((u ^ prefix) >> (shift + RADIX_BITS)) == 0)
                    acc += ((digit[:, None] >= bins[None, :]) & match[:, None]).to(tl.int32)
                counts = tl.sum(acc, axis=0)  # counts[j]: matching elements with digit >= j
                d = tl.max(tl.where(counts >= k_rem, bins, 0), axis=0)
                above = tl.sum(tl.where(bins == d + 1, counts, 0), axis=0)
                matching = tl.sum(tl.where(bins == d, counts, 0), axis=0) - above
                k_rem = k_rem - above
                prefix = prefix | (d << shift)
        threshold = prefix ^ sign_bit

    # Compaction in ascending token order.
    chosen = tl.full([], 0, tl.int32)
    ties = tl.full([], 0, tl.int32)
    for start in range(0, n, BLOCK):
        t = start + offs
        valid = t < n
        v = tl.load(src + t * l_s1, mask=valid, other=0.0)
        s = _signed_key(v)
        tie = (valid & (s == threshold)).to(tl.int32)
        tie_rank = ties + tl.cumsum(tie, axis=0) - tie
        pick = (valid & (s > threshold)) | ((tie != 0) & (tie_rank < k_rem))
        pick_i = pick.to(tl.int32)
        slot = chosen + tl.cumsum(pick_i, axis=0) - pick_i
        tl.store(dst + slot, t, mask=pick)
        chosen += tl.sum(pick_i, axis=0)
        ties += tl.sum(tie, axis=0)

    # Unused slots.
    used = tl.minimum(n, K)
    for start in range(0, K, BLOCK):
        slot = start + offs
        tl.store(dst + slot, tl.full([BLOCK], -1, tl.int32), mask=(slot >= used) & (slot < K))


def mla_topk(sh, *, logits: torch.Tensor, ctx_len: torch.Tensor, idx: torch.Tensor) -> None:
    rows, cap = logits.shape
    k = sh.dims.idx_topk
    assert idx.shape == (rows, k) and idx.dtype == torch.int32 and idx.stride(1) == 1
    if rows == 0:
        return
    if platform.FEW_PROGRAMS:  # interpreter: a row's whole capacity per block, 4 passes of 8 bits
        block, radix_bits = min(max(16, next_pow2(cap)), 4096), 8
    else:
        block, radix_bits = get("mla.topk.block"), get("mla.topk.radix_bits")
    _topk_kernel[(rows,)](
        logits, ctx_len, idx, logits.stride(0), logits.stride(1), idx.stride(0), cap,
        K=k, BLOCK=block, RADIX_BITS=radix_bits, num_warps=get("mla.topk.num_warps"),
    )
