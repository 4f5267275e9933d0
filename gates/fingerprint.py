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


def digest_on_device(t: torch.Tensor) -> torch.Tensor:
    """The two position-keyed sums as an int64 tensor [2] on ``t``'s device (no host sync)."""
    if t.numel() == 0:
        return torch.zeros(2, dtype=torch.int64, device=t.device)
    w = _words(t)
    idx = torch.arange(w.numel(), device=w.device, dtype=torch.int64)
    a = _mix(w ^ _mix(idx & _M))
    b = _mix(a ^ 0x5BD1E995 ^ (idx >> 3))
    return torch.stack([a.sum(), b.sum()]) & 0x7FFFFFFFFFFF


def label(t: torch.Tensor, sums) -> str:
    return f"{t.dtype}{tuple(t.shape)}:{int(sums[0]):012x}{int(sums[1]):012x}"


def value_view(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_floating_point and t.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t + 0.0  # -0 + 0 = +0 under round-to-nearest
    return t


def raw_hash(t: torch.Tensor) -> str:
    return label(t, digest_on_device(t).tolist())


def value_hash(t: torch.Tensor) -> str:
    return label(t, digest_on_device(value_view(t)).tolist())


class Pending:
    """Digests and counts queued on the device and read back in one sync (a tap hashes
    thousands of op outputs per step; one host sync each would dominate its time)."""

    def __init__(self):
        self._items: list = []  # (kind, tensor-or-template, device value)

    def digest(self, t: torch.Tensor) -> int:
        self._items.append(("hash", (t.dtype, tuple(t.shape)), digest_on_device(t)))
        return len(self._items) - 1

    def count(self, n: torch.Tensor) -> int:
        self._items.append(("count", None, n.reshape(1).to(torch.int64)))
        return len(self._items) - 1

    def resolve(self) -> list:
        if not self._items:
            return []
        by_dev: dict = {}
        for i, (_, _, v) in enumerate(self._items):
            by_dev.setdefault(v.device, []).append(i)
        values: list = [None] * len(self._items)
        for dev, idxs in by_dev.items():
            flat = torch.cat([self._items[i][2].reshape(-1) for i in idxs]).tolist()
            pos = 0
            for i in idxs:
                n = self._items[i][2].numel()
                values[i] = flat[pos:pos + n]
                pos += n
        out = []
        for (kind, meta, _), v in zip(self._items, values):
            if kind == "hash":
                dtype, shape = meta
                out.append(f"{dtype}{shape}:{v[0]:012x}{v[1]:012x}")
            else:
                out.append(int(v[0]))
        self._items.clear()
        return out
