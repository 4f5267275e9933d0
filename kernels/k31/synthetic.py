"""Seeded synthetic values addressed by global index. Protected.

Every weight, cache row and state value of the synthetic model is a pure function of
``(seed name, global element index)``: a counter-based hash, not a sequential generator.
So rank r of any layout draws exactly its slice of the one global model, and a W-rank run
can be checked against a 1-rank run. The hash runs in a Triton kernel (exact 32-bit integer
math on GPU and in the CPU interpreter alike); only the final ``log``/``cos`` of the normal
transform are floating point.

``draw(name, starts, cols)`` returns ``[len(starts), cols]`` f32 values; row ``r`` covers the
global indices ``starts[r] .. starts[r] + cols - 1`` of the named global tensor.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
import triton
import triton.language as tl

from .platform import INTERPRET

NORMAL = 0
UNIFORM = 1  # uniform on [-sqrt(3), sqrt(3)]: unit variance, no tails


@triton.jit
def _mix(x):
    # lowbias32 (Wellons): a well-tested 32-bit avalanche hash; uint32 multiply wraps.
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    x = x ^ (x >> 16)
    return x


@triton.jit
def _fill_kernel(out_ptr, starts_ptr, n, cols, seed_lo, seed_hi, std,
                 KIND: tl.constexpr, BLOCK: tl.constexpr):
    # flat over the output: element e is row e // cols, column e % cols
    e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = e < n
    r = e // cols
    idx = tl.load(starts_ptr + r, mask=mask, other=0) + (e - r * cols)
    lo = (idx & 0xFFFFFFFF).to(tl.uint32)
    hi = (idx >> 32).to(tl.uint32)
    h = _mix(lo ^ seed_lo.to(tl.uint32))
    h = _mix(h ^ hi ^ seed_hi.to(tl.uint32))
    u1 = ((h >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
    if KIND == 0:
        h2 = _mix(h ^ 0x9E3779B9)
        u2 = ((h2 >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
        z = tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
    else:
        z = (2.0 * u1 - 1.0) * 1.7320508075688772
    tl.store(out_ptr + e, z * std, mask=mask)


def _mix_np(x):
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def _fill_numpy(starts: np.ndarray, cols: int, lo: int, hi: int, std: float, kind: int) -> np.ndarray:
    """The same function as ``_fill_kernel`` in numpy, for CPU tensors (the Triton interpreter
    pays ~0.1 s per launch). Integer math is identical; tests compare the two bit for bit."""
    idx = (starts.astype(np.int64)[:, None] + np.arange(cols, dtype=np.int64)[None, :]).ravel()
    with np.errstate(over="ignore"):
        h = _mix_np((idx & 0xFFFFFFFF).astype(np.uint32) ^ np.uint32(lo))
        h = _mix_np(h ^ (idx >> 32).astype(np.uint32) ^ np.uint32(hi))
        u1 = ((h >> np.uint32(8)).astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / 16777216.0)
        if kind == NORMAL:
            h2 = _mix_np(h ^ np.uint32(0x9E3779B9))
            u2 = ((h2 >> np.uint32(8)).astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / 16777216.0)
            z = np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(np.float32(6.283185307179586) * u2)
        else:
            z = (np.float32(2.0) * u1 - np.float32(1.0)) * np.float32(1.7320508075688772)
    return (z * np.float32(std)).astype(np.float32).reshape(len(starts), cols)


def seed_of(*parts) -> tuple[int, int]:
    """Two 31-bit keys from a readable name, stable across Python runs (no ``hash()``)."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return (int.from_bytes(digest[:4], "little") & 0x7FFFFFFF,
            int.from_bytes(digest[4:8], "little") & 0x7FFFFFFF)


def draw(name: tuple, starts: torch.Tensor | list[int], cols: int, *, std: float = 1.0,
         kind: int = NORMAL, device=None, force_triton: bool = False) -> torch.Tensor:
    if not isinstance(starts, torch.Tensor):
        starts = torch.tensor(list(starts), dtype=torch.int64, device=device)
    starts = starts.to(torch.int64)
    out = torch.empty(starts.numel(), cols, dtype=torch.float32, device=starts.device)
    if out.numel() == 0:
        return out
    lo, hi = seed_of(*name)
    if out.device.type == "cpu" and not force_triton:
        out.copy_(torch.from_numpy(_fill_numpy(starts.numpy(), cols, lo, hi, std, kind)))
        return out
    # the CPU interpreter pays per program, a GPU wants many programs
    block = 1 << 18 if INTERPRET else 1024
    n = out.numel()
    _fill_kernel[(triton.cdiv(n, block),)](out, starts, n, cols, lo, hi, float(std), KIND=kind,
                                           BLOCK=block)
    return out


def draw_rows(name: tuple, rows: range | list[int], cols: int, row_len: int | None = None, *,
              std: float = 1.0, kind: int = NORMAL, col0: int = 0, device=None) -> torch.Tensor:
    """Rows ``rows`` (global row ids) of a global ``[*, row_len]`` tensor, columns
    ``col0 .. col0 + cols``."""
    row_len = cols if row_len is None else row_len
    starts = torch.tensor([r * row_len + col0 for r in rows], dtype=torch.int64, device=device)
    return draw(name, starts, cols, std=std, kind=kind)
