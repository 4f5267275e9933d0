"""Content hashes of tensors, computed where the tensor lives (no copy to the host).

``raw``: of the stored bytes (bit identity). ``value``: of the values with -0 folded into +0
(value identity: only signed zeros differ). Each is two 31-bit position-keyed sums of mixed
32-bit words, so any changed, moved or swapped word changes it with overwhelming probability;
integer sums are exact, so the hash does not depend on reduction order.
"""
from __future__ import annotations

import torch

_M = 0xFFFFFFFF


def _mix(x: torch.Tensor) -> torch.Tensor:
    # products stay below 2**63: operands are < 2**32 and constants < 2**31
    x = (x ^ (x >> 16)) * 0x45D9F3B & _M
    x = (x ^ (x >> 16)) * 0x45D9F3B & _M
    return x ^ (x >> 16)


def _words(t: torch.Tensor) -> torch.Tensor:
    b = t.contiguous().reshape(-1).view(torch.uint8)
    pad = (-b.numel()) % 4
    if pad:
        b = torch.cat([b, b.new_zeros(pad)])
    return b.view(torch.int32).to(torch.int64) & _M


def _digest(t: torch.Tensor) -> str:
    if t.numel() == 0:
        return f"empty:{tuple(t.shape)}"
    w = _words(t)
    idx = torch.arange(w.numel(), device=w.device, dtype=torch.int64)
    a = _mix(w ^ _mix(idx & _M))
    b = _mix(a ^ 0x5BD1E995 ^ (idx >> 3))
    return f"{int(a.sum()) & 0x7FFFFFFFFFFF:012x}{int(b.sum()) & 0x7FFFFFFFFFFF:012x}"


def raw_hash(t: torch.Tensor) -> str:
    return f"{t.dtype}{tuple(t.shape)}:" + _digest(t)


def value_hash(t: torch.Tensor) -> str:
    if t.dtype.is_floating_point and t.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = t + 0.0  # -0 + 0 = +0 under round-to-nearest
    return f"{t.dtype}{tuple(t.shape)}:" + _digest(t)
