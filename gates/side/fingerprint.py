"""Content hashes of tensors, computed where the tensor lives (no copy to the host).

``raw``: of the stored bytes (bit identity). ``value``: of the values with -0 folded into +0
(value identity: only signed zeros differ). Each is two 47-bit position-keyed sums of mixed
32-bit words, so any changed, moved or swapped word changes it with overwhelming probability;
integer sums are exact, so the hash does not depend on reduction order.

On a GPU the words are mixed by one Triton kernel (a tap hashes every op call's outputs and
state; the torch expression below costs ~30 launches and 8-byte temporaries per word, which
made the full-config tap launch-bound). The two paths define different functions: a digest is
only ever compared with one made on the same kind of device (the gate keys its recordings by
device), and the CPU path stays the plain torch one.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

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


@triton.jit
def _mix32(x):
    x = (x ^ (x >> 16)) * 0x45D9F3B
    x = (x ^ (x >> 16)) * 0x45D9F3B
    return x ^ (x >> 16)


@triton.jit
def _digest_kernel(words, n, partial, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    idx = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = idx < n
    w = tl.load(words + idx, mask=live, other=0).to(tl.uint32)
    pos = (idx ^ (idx >> 32)).to(tl.uint32)
    a = _mix32(w ^ _mix32(pos))
    b = _mix32(a ^ 0x5BD1E995 ^ (idx >> 3).to(tl.uint32))
    # uint32 terms summed in int64: a block of BLOCK terms cannot overflow
    tl.store(partial + 2 * pid, tl.sum(tl.where(live, a, 0).to(tl.int64), axis=0))
    tl.store(partial + 2 * pid + 1, tl.sum(tl.where(live, b, 0).to(tl.int64), axis=0))


_BLOCK = 4096


def _digest_cuda(t: torch.Tensor) -> torch.Tensor:
    b = t.contiguous().reshape(-1).view(torch.uint8)
    words = b.view(torch.int32) if b.numel() % 4 == 0 else b  # odd sizes: one word per byte
    n = words.numel()
    grid = triton.cdiv(n, _BLOCK)
    partial = torch.empty(grid, 2, dtype=torch.int64, device=t.device)
    _digest_kernel[(grid,)](words, n, partial, BLOCK=_BLOCK)
    return partial.sum(0) & 0x7FFFFFFFFFFF


def digest_on_device(t: torch.Tensor) -> torch.Tensor:
    """The two position-keyed sums as an int64 tensor [2] on ``t``'s device (no host sync)."""
    if t.numel() == 0:
        return torch.zeros(2, dtype=torch.int64, device=t.device)
    if t.device.type == "cuda":
        return _digest_cuda(t)
    w = _words(t)
    idx = torch.arange(w.numel(), device=w.device, dtype=torch.int64)
    a = _mix(w ^ _mix(idx & _M))
    b = _mix(a ^ 0x5BD1E995 ^ (idx >> 3))
    return torch.stack([a.sum(), b.sum()]) & 0x7FFFFFFFFFFF


def label(t: torch.Tensor, sums) -> str:
    return f"{t.dtype}{tuple(t.shape)}:{int(sums[0]):012x}{int(sums[1]):012x}"


def value_view(t: torch.Tensor) -> torch.Tensor:
    """``t`` with -0 folded into +0; ``t`` itself where values and bytes are the same thing
    (integers; fp8, whose -0 the formats here never produce) so callers can skip a digest."""
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

    def digests(self, t: torch.Tensor) -> tuple[int, int]:
        """(raw, value) digests; one digest serves both where the value view is ``t``."""
        raw = self.digest(t)
        v = value_view(t)
        return raw, (raw if v is t else self.digest(v))

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
