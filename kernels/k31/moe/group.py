"""Grouping of (row, slot) pairs by local expert for moe.experts, on the device, without a host sync.

A pair is ``p = row * top_k + slot``; its expert is ``ids.flat[p]``; it is local when that lies in
``[expert_first, expert_first + n_local)``. The grouping (like vLLM's moe_align_block_size):

* ``sorted_pairs [max_blocks * block_m]`` int32: local experts in ascending order, each expert's
  pairs in ascending pair order, each expert's run padded with the sentinel ``n_pairs`` to a
  multiple of ``block_m``. Entries past ``n_blocks * block_m`` are stale (never read).
* ``block_expert [max_blocks]`` int32: the local expert of each block (valid below n_blocks).
* ``n_blocks [1]`` int32: blocks in use.

``max_blocks`` bounds n_blocks for any routing: with ``m`` experts hit by ``L <= n_pairs`` pairs,
``sum cdiv(c_e, block_m) <= m + (L - m) // block_m``, which grows with m and L, so
``n = min(n_local, n_pairs)`` gives ``max_blocks = n + (n_pairs - n) // block_m``.

Two launches, deterministic (no atomics; ranks come from in-order prefix counts):

1. ``_count_kernel``, grid ``cdiv(n_local, block_e)``: each program counts the pairs of its
   ``block_e`` experts by comparing against all pairs, ``block_p`` at a time.
2. ``_place_kernel``, grid ``max(cdiv(n_local, block_e), cdiv(max_blocks, block_b))``: every
   program loads all counts and forms the block prefix sums (tl.cumsum). It then (a) writes the
   pair ids of its experts at ``start * block_m + rank`` (rank: the pair's order among that
   expert's pairs, an in-chunk cumsum plus a running count) and their padding sentinels, and
   (b) maps its ``block_b`` blocks to experts (expert of block b = number of experts whose
   block range ends at or before b). Program 0 writes n_blocks.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..platform import cdiv, next_pow2
from ..scratch import cached


@triton.jit
def _pair_expert(ids_ptr, ids_rs, p, n_pairs, expert_first, TOP_K: tl.constexpr):
    """Local expert index of pairs ``p`` (negative or >= n_local when not local; -1 - expert_first
    past n_pairs)."""
    eid = tl.load(ids_ptr + (p // TOP_K) * ids_rs + p % TOP_K, mask=p < n_pairs, other=-1)
    return eid - expert_first


@triton.jit
def _count_kernel(ids_ptr, ids_rs, counts_ptr, n_pairs, expert_first, n_local,
                  TOP_K: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_P: tl.constexpr):
    e = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    cnt = tl.zeros([BLOCK_E], tl.int32)
    for p0 in range(0, n_pairs, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        le = _pair_expert(ids_ptr, ids_rs, p, n_pairs, expert_first, TOP_K)
        cnt += tl.sum((le[None, :] == e[:, None]).to(tl.int32), axis=1)
    tl.store(counts_ptr + e, cnt, mask=e < n_local)


@triton.jit
def _place_kernel(ids_ptr, ids_rs, counts_ptr, sorted_ptr, block_expert_ptr, n_blocks_ptr,
                  n_pairs, expert_first, n_local, max_blocks,
                  TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, E_PAD: tl.constexpr,
                  BLOCK_E: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_B: tl.constexpr):
    pid = tl.program_id(0)
    ea = tl.arange(0, E_PAD)
    blocks_all = (tl.load(counts_ptr + ea, mask=ea < n_local, other=0) + BLOCK_M - 1) // BLOCK_M
    end_all = tl.cumsum(blocks_all, axis=0)  # inclusive block prefix per expert
    if pid == 0:
        tl.store(n_blocks_ptr, tl.sum(blocks_all, axis=0))

    # (b) block -> expert. Experts with no blocks end where the next one starts, so counting
    # every expert whose range ends at or before b lands on the expert that owns b.
    b = pid * BLOCK_B + tl.arange(0, BLOCK_B)
    owner = tl.sum((end_all[None, :] <= b[:, None]).to(tl.int32), axis=1)
    tl.store(block_expert_ptr + b, tl.minimum(owner, n_local - 1), mask=b < max_blocks)

    # (a) pair ids of this program's experts, in pair order, then the padding sentinels.
    e0 = pid * BLOCK_E
    if e0 < n_local:
        e = e0 + tl.arange(0, BLOCK_E)
        e_ok = e < n_local
        start = tl.sum(tl.where(ea[None, :] < e[:, None], blocks_all[None, :], 0), axis=1) * BLOCK_M
        seen = tl.zeros([BLOCK_E], tl.int32)
        for p0 in range(0, n_pairs, BLOCK_P):
            p = p0 + tl.arange(0, BLOCK_P)
            le = _pair_expert(ids_ptr, ids_rs, p, n_pairs, expert_first, TOP_K)
            hit = (le[None, :] == e[:, None]).to(tl.int32)
            rank = tl.cumsum(hit, axis=1) - 1 + seen[:, None]
            pairs = tl.zeros([BLOCK_E, BLOCK_P], tl.int32) + p[None, :]
            tl.store(sorted_ptr + start[:, None] + rank, pairs, mask=(hit != 0) & e_ok[:, None])
            seen += tl.sum(hit, axis=1)
        j = tl.arange(0, BLOCK_M)
        padded = (seen + BLOCK_M - 1) // BLOCK_M * BLOCK_M
        fill = seen[:, None] + j[None, :]
        sentinel = tl.zeros([BLOCK_E, BLOCK_M], tl.int32) + n_pairs
        tl.store(sorted_ptr + start[:, None] + fill, sentinel,
                 mask=(fill < padded[:, None]) & e_ok[:, None])


def max_blocks(n_pairs: int, n_local: int, block_m: int) -> int:
    n = min(n_local, n_pairs)
    return n + (n_pairs - n) // block_m


class Grouping:
    """Scratch of one grouping shape, allocated once (outside CUDA-graph capture) and reused."""

    def __init__(self, device, n_pairs: int, n_local: int, block_m: int):
        self.n_pairs, self.n_local, self.block_m = n_pairs, n_local, block_m
        self.max_blocks = max_blocks(n_pairs, n_local, block_m)
        i32 = dict(dtype=torch.int32, device=device)
        self.counts = torch.zeros(n_local, **i32)
        self.sorted_pairs = torch.zeros(self.max_blocks * block_m, **i32)
        self.block_expert = torch.zeros(self.max_blocks, **i32)
        self.n_blocks = torch.zeros(1, **i32)

    def build(self, ids: torch.Tensor, expert_first: int, *, block_e: int, block_p: int, block_b: int) -> None:
        """Fill the scratch from ``ids [rows, top_k]`` (device-side only)."""
        rows, top_k = ids.shape
        assert rows * top_k == self.n_pairs and ids.stride(1) == 1
        block_p = min(block_p, next_pow2(self.n_pairs))
        block_e = min(block_e, next_pow2(self.n_local))
        e_programs = cdiv(self.n_local, block_e)
        _count_kernel[(e_programs,)](
            ids, ids.stride(0), self.counts, self.n_pairs, expert_first, self.n_local,
            TOP_K=top_k, BLOCK_E=block_e, BLOCK_P=block_p)
        grid = max(e_programs, cdiv(self.max_blocks, block_b))
        _place_kernel[(grid,)](
            ids, ids.stride(0), self.counts, self.sorted_pairs, self.block_expert, self.n_blocks,
            self.n_pairs, expert_first, self.n_local, self.max_blocks,
            TOP_K=top_k, BLOCK_M=self.block_m, E_PAD=next_pow2(self.n_local),
            BLOCK_E=block_e, BLOCK_P=block_p, BLOCK_B=block_b)


def grouping(device, n_pairs: int, n_local: int, block_m: int) -> Grouping:
    """The grouping scratch of this shape, made on the first (eager) call."""
    return cached(("moe.experts.grouping", str(device), n_pairs, n_local, block_m),
                  lambda: Grouping(device, n_pairs, n_local, block_m))
