"""Exact top-K of the indexer logits (``mla.topk``), K = ``dims.idx_topk``.

For each row: the K largest of ``logits[r, :ctx_len[r]]``, ties broken by the lower token
index, written in ascending token order to ``idx [rows, K]`` (int32), ``-1`` in unused slots;
when ``ctx_len <= K`` every token ``0..ctx_len-1`` is chosen. Bit-exact with the reference.

Design: one program per row that reads its row from memory once and keeps it in registers.
The row's first ``HEAD`` tokens (the largest power of two <= the capacity, at most
``RESIDENT_PER_THREAD`` a thread) are loaded once as keys; any tokens past ``HEAD`` (the
capacity is rarely a power of two: 16384 + one page at the published shapes) are streamed in
blocks of ``BLOCK``, and only rows whose ``ctx_len`` reaches past ``HEAD`` pay for them.

1. Key: the f32 value as an order-preserving int32 (``-0.0`` canonicalized to ``+0.0`` so the
   two zeros tie, as they do in the reference's sort).
2. Threshold search on a bracket ``[lo, hi)`` of keys with ``count(>= lo) >= K > fhi =
   count(>= hi)``, starting from the row's min and max + 1 (one max/min reduction). Each step
   probes one key inside the bracket and counts the keys >= it (one compare a key and one
   block-wide sum), then moves ``lo`` or ``hi`` to the probe. The probe interpolates where the
   K-th key falls (regula falsi on the count, Illinois variant: the kept side's weight halves
   when the same side moves twice), which takes ~10 steps on continuous data where a bitwise
   binary search takes ~22; after ``INTERP_STEPS`` steps it bisects (at most 32 more whatever
   the data, e.g. heavy ties). It ends when ``hi = lo + 1``: ``lo`` is the K-th largest key and
   ``k_rem = K - fhi`` of its ties are taken; or early, when a probe counts exactly K keys:
   they are the answer (``k_rem = K`` takes every key equal to the probe).
3. Compaction in index order: chosen = key > threshold, or key == threshold and the tie's rank
   < ``k_rem``. One exclusive ``tl.cumsum`` of (greater << 16 | tie) gives each token both
   ranks, so its output slot is greater-before + min(ties-before, k_rem) and the output is
   ascending by construction.
4. Slots ``min(ctx_len, K) .. K-1`` get ``-1``.

The answer comes from integer counts only, so it is deterministic and graph capturable
(a static grid of ``rows`` programs, loops bounded by on-device values). The interpreter runs
the same launch (one program per row is already few programs). The probes depend on f32
rounding and so may differ between machines; the answer never does.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..platform import next_pow2
from ..tunables import get

# Keys a thread holds for the resident head of the row: 16 warps x 32 lanes x 32 = 16384 tokens
# (the published shapes' per-rank context) in 32 registers a thread; 64 still fits (one program
# per SM). Longer rows stream their remainder.
RESIDENT_PER_THREAD = 64
# Interpolation steps before the search falls back to bisection (typical rows need ~10; rows
# with heavy ties at the K-th key may need the bisection).
INTERP_STEPS = 24
# Head sizes stay below 2**16 so that the packed (greater << 16 | tie) ranks cannot overflow.
_HEAD_MAX = 1 << 15


@triton.jit
def _signed_key(v):
    """f32 -> int32 whose signed order is the float order (-0.0 == +0.0)."""
    v = tl.where(v == 0.0, 0.0, v)
    b = v.to(tl.int32, bitcast=True)
    return b ^ ((b >> 31) & 0x7FFFFFFF)


@triton.jit
def _max_min(a_max, a_min, b_max, b_min):
    return tl.maximum(a_max, b_max), tl.minimum(a_min, b_min)


@triton.jit
def _topk_kernel(
    logits_ptr, ctx_ptr, out_ptr, l_s0, l_s1, out_s0, cap,
    K: tl.constexpr, HEAD: tl.constexpr, BLOCK: tl.constexpr, KP: tl.constexpr,
    INTERP: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    n = tl.minimum(tl.load(ctx_ptr + row).to(tl.int32), cap)
    src = logits_ptr + row * l_s0
    dst = out_ptr + row * out_s0
    offs = tl.arange(0, HEAD)
    boffs = tl.arange(0, BLOCK)
    sign_bit = tl.full([], 1, tl.int32) << 31  # the smallest int32
    int_max = ~sign_bit
    # The head's keys, read once; past ctx_len the key is the smallest int32, which no
    # candidate (>= 1 in unsigned order) reaches, and the compaction masks it out.
    head_valid = offs < n
    v = tl.load(src + offs * l_s1, mask=head_valid, other=0.0)
    s = tl.where(head_valid, _signed_key(v), sign_bit)

    # Every key above the threshold is chosen, and the first k_rem keys equal to it (by token
    # index). With n <= K the threshold is the smallest key and k_rem = K >= n: all are chosen.
    threshold = sign_bit
    k_rem = tl.full([], K, tl.int32)
    if n > K:
        # Bracket [lo, hi) in signed key order (int64: hi may be 2**31): count(>= lo) = flo
        # >= K > fhi = count(>= hi). Start from the keys' min and max + 1.
        hi_k, lo_k = tl.reduce((s, tl.where(head_valid, s, int_max)), 0, _max_min)
        for start in range(HEAD, n, BLOCK):  # the non-resident remainder, if any
            t = start + boffs
            valid = t < n
            sk = _signed_key(tl.load(src + t * l_s1, mask=valid, other=0.0))
            b_hi, b_lo = tl.reduce((tl.where(valid, sk, sign_bit), tl.where(valid, sk, int_max)),
                                   0, _max_min)
            hi_k = tl.maximum(hi_k, b_hi)
            lo_k = tl.minimum(lo_k, b_lo)
        lo = lo_k.to(tl.int64)
        hi = hi_k.to(tl.int64) + 1
        fhi = tl.full([], 0, tl.int32)
        # regula falsi on the count, Illinois variant: weights flo - K and K - fhi, the kept
        # side's weight halved when the same side moves twice in a row
        w_lo = (n - K).to(tl.float32)
        w_hi = tl.full([], K, tl.float32)
        last = tl.full([], 0, tl.int32)  # +1: lo moved last, -1: hi moved last
        steps = tl.full([], 0, tl.int32)
        while hi - lo > 1:
            if steps < INTERP:
                # f32 is plenty for a guess (the clamp keeps it inside the bracket)
                probe = lo + ((hi - lo).to(tl.float32) * (w_lo / (w_lo + w_hi))).to(tl.int64)
            else:  # bisection: whatever the data, at most 32 more steps
                probe = lo + (hi - lo) // 2
            probe = tl.minimum(tl.maximum(probe, lo + 1), hi - 1)
            cand = probe.to(tl.int32)
            c = tl.sum((s >= cand).to(tl.int32), axis=0)
            for start in range(HEAD, n, BLOCK):
                t = start + boffs
                valid = t < n
                w = tl.load(src + t * l_s1, mask=valid, other=0.0)
                c += tl.sum((valid & (_signed_key(w) >= cand)).to(tl.int32), axis=0)
            steps += 1
            if c > K:
                lo = probe
                if last > 0:
                    w_hi = w_hi * 0.5
                w_lo = (c - K).to(tl.float32)
                last = tl.full([], 1, tl.int32)
            elif c == K:  # exactly K keys >= probe: they are the answer (k_rem = K takes
                lo = probe  # every key equal to it)
                hi = probe + 1
                fhi = tl.full([], 0, tl.int32)
            else:
                hi = probe
                fhi = c
                if last < 0:
                    w_lo = w_lo * 0.5
                w_hi = (K - c).to(tl.float32)
                last = tl.full([], -1, tl.int32)
        threshold = lo.to(tl.int32)
        k_rem = K - fhi

    # Compaction in ascending token order: low 16 bits count ties, high 16 bits greater keys.
    gt = head_valid & (s > threshold)
    tie = head_valid & (s == threshold)
    code = gt.to(tl.int32) * 65536 + tie.to(tl.int32)
    before = tl.cumsum(code, axis=0) - code
    tie_rank = before & 0xFFFF
    pick = gt | (tie & (tie_rank < k_rem))
    slot = ((before >> 16) & 0xFFFF) + tl.minimum(tie_rank, k_rem)
    tl.store(dst + slot, offs, mask=pick)
    greater = tl.full([], 0, tl.int32)
    ties = tl.full([], 0, tl.int32)
    if n > HEAD:
        total = tl.sum(code, axis=0)
        greater = (total >> 16) & 0xFFFF
        ties = total & 0xFFFF
    for start in range(HEAD, n, BLOCK):
        t = start + boffs
        valid = t < n
        w = tl.load(src + t * l_s1, mask=valid, other=0.0)
        sk = _signed_key(w)
        gt_b = valid & (sk > threshold)
        tie_b = valid & (sk == threshold)
        code_b = gt_b.to(tl.int32) * 65536 + tie_b.to(tl.int32)
        before_b = tl.cumsum(code_b, axis=0) - code_b
        rank_b = ties + (before_b & 0xFFFF)
        pick_b = gt_b | (tie_b & (rank_b < k_rem))
        slot_b = greater + ((before_b >> 16) & 0xFFFF) + tl.minimum(rank_b, k_rem)
        tl.store(dst + slot_b, t, mask=pick_b)
        total_b = tl.sum(code_b, axis=0)
        greater += (total_b >> 16) & 0xFFFF
        ties += total_b & 0xFFFF

    # Unused slots.
    used = tl.minimum(n, K)
    ks = tl.arange(0, KP)
    tl.store(dst + ks, tl.full([KP], -1, tl.int32), mask=(ks >= used) & (ks < K))


def launch_shape(cap: int, num_warps: int) -> int:
    """HEAD: the row's resident tokens, the largest power of two <= ``cap`` that a program of
    ``num_warps`` holds at ``RESIDENT_PER_THREAD`` keys a thread (at least 16)."""
    head = next_pow2(cap + 1) // 2 if cap > 0 else 1
    return max(16, min(head, 32 * num_warps * RESIDENT_PER_THREAD, _HEAD_MAX))


def mla_topk(sh, *, logits: torch.Tensor, ctx_len: torch.Tensor, idx: torch.Tensor) -> None:
    rows, cap = logits.shape
    k = sh.dims.idx_topk
    assert idx.shape == (rows, k) and idx.dtype == torch.int32 and idx.stride(1) == 1
    if rows == 0:
        return
    num_warps = get("mla.topk.num_warps")
    _topk_kernel[(rows,)](
        logits, ctx_len, idx, logits.stride(0), logits.stride(1), idx.stride(0), cap,
        K=k, HEAD=launch_shape(cap, num_warps), BLOCK=get("mla.topk.block"), KP=next_pow2(k),
        INTERP=INTERP_STEPS, num_warps=num_warps,
    )
