"""comm.oneshot: a one-shot all-reduce of decode-sized messages over torch symmetric memory.

Each rank owns one symmetric buffer (``torch.distributed._symmetric_memory``, the CUDA backend:
peer buffers mapped into every rank's address space; no NVLink multicast, no ``multimem``). One
call ``OneShotAllReduce.reduce(*tensors)`` runs, all on the current stream (no host sync, no
allocation, fixed buffers, so a CUDA graph can hold it):

1. copy: each tensor, flattened, into this rank's buffer at a fixed offset (``pack_offsets``);
2. barrier, channel 0: torch's signal-pad barrier (a release put to every peer, an acquire wait
   on every peer, system scope), so every peer's copy is visible before anyone reads it;
3. sum: per tensor one launch of :func:`_sum_kernel`, which reads the W buffers' slices and
   adds them in rank order 0..W-1 in f32, rounding once to the tensor's dtype, written in place.
   That is exactly ``collectives.sum_in_rank_order`` followed by ``copy_``: the same adds in
   the same order, so every rank gets the same bytes, and the same bytes as the gather path;
4. barrier, channel 1: no rank starts its next call's copy (overwriting its buffer) while a
   peer still reads it. (Alternating two buffers would save this barrier, but the parity of a
   call would then depend on how many calls a captured graph holds and on eager calls between
   replays; one more barrier is the simpler contract.)

:func:`oneshot_sum` (step 3 alone, over any W same-shaped flat tensors) is what the CPU tests
run through the Triton interpreter; the symmetric memory parts need CUDA and W processes.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .. import platform
from ..platform import INTERPRET, cdiv, next_pow2
from ..rounding import rounded

MAX_WORLD = 8  # the kernel takes one pointer per rank, P0..P7
ALIGN = 256  # bytes between packed tensors: 16-byte vector loads on every peer's slice
# a barrier waiting this long means a peer will never arrive (a rank died or skipped a call);
# the kernel then traps instead of hanging the GPU forever. Long enough for a peer that is
# still compiling the step's kernels on its first eager run.
BARRIER_TIMEOUT_MS = 300_000
SUMMABLE = (torch.bfloat16, torch.float16, torch.float32)
# Launch shape on a GPU: one program sums BLOCK elements over the W ranks; at 128 rows x 7168
# bf16 that is 448 programs (over 3 per SM of 132), each thread loading 16 contiguous bytes per
# rank at 4 warps. Constants, not tunables: the loop benches one rank, where no all-reduce
# runs, so a tuner attempt on them could only measure noise. They become tunables (a
# comm/tunables.py and "comm" in tunables.FAMILIES) once kern bench times several ranks.
BLOCK = 2048
NUM_WARPS = 4


@triton.jit
def _sum_kernel(out_ptr, p0, p1, p2, p3, p4, p5, p6, p7, n,
                W: tl.constexpr, BLOCK: tl.constexpr, RNE: tl.constexpr):
    """Program ``pid`` writes ``out[pid * BLOCK : (pid + 1) * BLOCK]`` = the f32 sum of the W
    ranks' elements, added in rank order (``p0`` first), rounded once to ``out``'s dtype."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    # unrolled, one pointer argument per rank: the adds read in rank order, and the constexpr W
    # compiles away the ranks that do not exist
    acc = tl.load(p0 + offs, mask=m, other=0.0).to(tl.float32)
    if W > 1:
        acc += tl.load(p1 + offs, mask=m, other=0.0).to(tl.float32)
    if W > 2:
        acc += tl.load(p2 + offs, mask=m, other=0.0).to(tl.float32)
    if W > 3:
        acc += tl.load(p3 + offs, mask=m, other=0.0).to(tl.float32)
    if W > 4:
        acc += tl.load(p4 + offs, mask=m, other=0.0).to(tl.float32)
    if W > 5:
        acc += tl.load(p5 + offs, mask=m, other=0.0).to(tl.float32)
    if W > 6:
        acc += tl.load(p6 + offs, mask=m, other=0.0).to(tl.float32)
    if W > 7:
        acc += tl.load(p7 + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, rounded(acc, out_ptr.dtype.element_ty, RNE), mask=m)


def oneshot_sum(out: torch.Tensor, parts: list[torch.Tensor]) -> None:
    """``out [n]`` = the rank-order f32 sum of ``parts`` (W flat tensors of ``n`` elements, rank
    0 first; on a GPU the W ranks' symmetric buffer slices), rounded once to ``out.dtype``.
    ``out`` may be one of the parts' memory only if that part is read by no other program
    (the launch reads and writes each element in the same program, so in place is safe)."""
    W, n = len(parts), out.numel()
    if not 1 <= W <= MAX_WORLD:
        raise ValueError(f"oneshot_sum: the kernel sums 1 to {MAX_WORLD} ranks' parts, got {W}")
    for r, p in enumerate(parts):
        if p.shape != (n,) or p.dtype != out.dtype or p.stride(0) != 1:
            raise ValueError(f"oneshot_sum: part {r} must be a contiguous [{n}] {out.dtype} "
                             f"tensor, got {tuple(p.shape)} {p.dtype} stride {p.stride()}")
    if not out.is_contiguous() or out.dtype not in SUMMABLE:
        raise ValueError(f"oneshot_sum: out must be contiguous and one of {SUMMABLE}, got "
                         f"{out.dtype}, contiguous={out.is_contiguous()}")
    if n == 0:
        return
    # GPU: the tunable block (hundreds of programs at decode sizes); interpreter: few programs
    block = min(next_pow2(n), 1 << 17) if platform.FEW_PROGRAMS else BLOCK
    ptrs = list(parts) + [parts[0]] * (MAX_WORLD - W)  # placeholders, never read (W constexpr)
    _sum_kernel[(cdiv(n, block),)](
        out.view(-1), *ptrs, n, W=W, BLOCK=block, RNE=INTERPRET,
        num_warps=NUM_WARPS)


def pack_offsets(sizes_bytes: list[int], align: int = ALIGN) -> tuple[list[int], int]:
    """Byte offsets of tensors packed one after another, each start a multiple of ``align``,
    and the bytes the packing spans."""
    offsets, end = [], 0
    for b in sizes_bytes:
        start = -(-end // align) * align
        offsets.append(start)
        end = start + int(b)
    return offsets, end


class OneShotAllReduce:
    """The symmetric buffer of ``capacity`` bytes over a process group and the one-shot call.

    Construction is collective (every rank of ``group`` must construct it, in the same order
    relative to other collectives) and needs CUDA and torch's symmetric memory; it raises
    whatever torch raises when the environment cannot map peer memory (the caller decides
    whether that is fatal, see ``collectives.Distributed``)."""

    def __init__(self, group_name: str, rank: int, world: int, device: torch.device, capacity: int):
        # No NVLink multicast: on a shared host a program using it can take every GPU out of
        # service (the device README). This kernel never uses the multicast pointer, and the
        # variable keeps torch's rendezvous from mapping one at all.
        os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
        import torch.distributed._symmetric_memory as symm_mem

        if not 1 <= world <= MAX_WORLD:
            raise ValueError(f"oneshot: the kernel sums at most {MAX_WORLD} ranks, the group has {world}")
        self.rank, self.world, self.capacity = rank, world, int(capacity)
        self.buffer = symm_mem.empty(self.capacity, dtype=torch.uint8, device=device)
        # a group name (not the ProcessGroup object): accepted by rendezvous in torch 2.11 and 2.13
        self.handle = symm_mem.rendezvous(self.buffer, group_name)
        # every rank's buffer, mapped into this process (rank order; this rank's is its own).
        # torch 2.13 may place the tensor at an offset inside a pooled block: get_remote_tensor
        # adds that offset, get_buffer (all older torch has) starts at the block. The check
        # below catches a view of the wrong bytes before any kernel reads it.
        if hasattr(self.handle, "get_remote_tensor"):
            self.peers = [self.handle.get_remote_tensor(r, (self.capacity,), torch.uint8) for r in range(world)]
        else:
            self.peers = [self.handle.get_buffer(r, (self.capacity,), torch.uint8) for r in range(world)]
        if self.peers[rank].data_ptr() != self.buffer.data_ptr():
            raise RuntimeError(
                f"oneshot: torch {torch.__version__}'s view of this rank's symmetric buffer starts at "
                f"{self.peers[rank].data_ptr():#x}, the buffer at {self.buffer.data_ptr():#x}; the "
                f"peers' views would be off by the same amount (kernels/k31/comm/oneshot.py must "
                f"follow torch's offset API)")

    def reduce(self, *tensors: torch.Tensor) -> None:
        """Sum each tensor over the ranks in place (rank order, f32, one rounding). Every rank
        must call this with the same shapes and dtypes in the same order."""
        offsets, _ = pack_offsets([t.numel() * t.element_size() for t in tensors])
        slices = []
        for t, off in zip(tensors, offsets):
            nb = t.numel() * t.element_size()
            slices.append([p[off:off + nb].view(t.dtype) for p in self.peers])
            slices[-1][self.rank].copy_(t.view(-1))
        self.handle.barrier(channel=0, timeout_ms=BARRIER_TIMEOUT_MS)
        for t, parts in zip(tensors, slices):
            oneshot_sum(t.view(-1), parts)
        self.handle.barrier(channel=1, timeout_ms=BARRIER_TIMEOUT_MS)
