"""The card's read ceiling: the best streaming read a kernel reaches on it, measured in the run.

Every roofline floor (the bench's % of floor, the profile's floors, the scorer's refusal of a
time below the floor) divides bytes by this ceiling. torch's ``sum`` over 1 GiB, the convenience
figure, under-reads an H200 by ~13 % (3.9 against ~4.5 TB/s on 2026-12-03): floors over it are
too generous, so it is reported beside the ceiling, never used for a floor.

The probe is a persistent Triton read over ``gib`` GiB of random f32 (not zeros: those can run
faster than data), each program summing strided chunks with wide loads; the ceiling is the best
median over a few launch shapes, because no single shape is the fastest on every card.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .timing import EVENT


@dataclass(frozen=True)
class LaunchShape:
    block: int  # f32 values one program loads per chunk
    unroll: int  # chunks in flight per loop step
    num_warps: int
    programs_per_sm: int

    def label(self) -> str:
        return f"block {self.block} x{self.unroll}, {self.num_warps} warps, {self.programs_per_sm}/SM"


# a few shapes around what saturates Hopper's HBM: 16-byte loads per thread, several in flight
SHAPES = (
    LaunchShape(4096, 1, 8, 4),
    LaunchShape(4096, 2, 8, 4),
    LaunchShape(8192, 2, 16, 2),
    LaunchShape(2048, 4, 4, 8),
    LaunchShape(4096, 4, 8, 2),
)


@triton.jit
def _stream_sum(x_ptr, part_ptr, n, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    chunks = tl.cdiv(n, BLOCK * UNROLL)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    # 4 GiB of f32 is 2**30 values, 16 GiB 2**32: offsets in int64 (an int64 start makes the
    # loop variable int64)
    for c in range(pid.to(tl.int64), chunks, nprog):
        base = c * (BLOCK * UNROLL)
        for u in tl.static_range(UNROLL):
            offs = base + u * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0, cache_modifier=".cg")
    tl.store(part_ptr + pid, tl.sum(acc, axis=0))


def stream_sum(x: torch.Tensor, shape: LaunchShape, programs: int) -> torch.Tensor:
    """Per-program partial sums of the flat f32 tensor ``x`` (their sum is ``x.sum()``)."""
    if x.dtype != torch.float32 or not x.is_contiguous():
        raise ValueError(f"stream_sum: expected a contiguous f32 tensor, found {x.dtype}, "
                         f"contiguous={x.is_contiguous()}")
    part = torch.empty(programs, device=x.device, dtype=torch.float32)
    _stream_sum[(programs,)](x, part, x.numel(), BLOCK=shape.block, UNROLL=shape.unroll,
                             num_warps=shape.num_warps)
    return part


def _median_s(run, device: torch.device, reps: int) -> float:
    times = []
    for _ in range(reps):
        s, e = EVENT(enable_timing=True), EVENT(enable_timing=True)
        s.record()
        run()
        e.record()
        torch.cuda.synchronize(device)
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    return times[len(times) // 2]


def torch_sum_bandwidth(device: torch.device, gib: float = 1.0, reps: int = 10) -> float:
    """torch's sum of ``gib`` GiB of bf16 (bytes/s): the convenience figure, reported beside."""
    n = int(gib * 2**30 // 2)
    x = torch.randn(n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        x.sum(dtype=torch.float32)
    t = _median_s(lambda x=x: x.sum(dtype=torch.float32), device, reps)
    del x
    return n * 2 / t


def read_ceiling(device: torch.device, gib: float = 4.0, reps: int = 10) -> dict | None:
    """``{"ceiling_Bps", "torch_sum_Bps", "gib", "best", "shapes": {label: Bps}}`` on a GPU;
    None on the CPU (no bandwidth there: floors are not checked)."""
    if device.type != "cuda":
        return None
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    n = int(gib * 2**30 // 4)
    x = torch.rand(n, device=device, dtype=torch.float32)
    shapes = {}
    for shape in SHAPES:
        programs = sms * shape.programs_per_sm
        stream_sum(x, shape, programs)  # compile and warm
        torch.cuda.synchronize(device)
        shapes[shape.label()] = n * 4 / _median_s(lambda x=x, s=shape, p=programs: stream_sum(x, s, p),
                                                   device, reps)
    del x
    torch.cuda.empty_cache()
    best = max(shapes, key=shapes.get)
    return {"ceiling_Bps": shapes[best], "torch_sum_Bps": torch_sum_bandwidth(device),
            "gib": gib, "best": best, "shapes": shapes}
