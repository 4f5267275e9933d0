"""Content hashes of tensors, computed where the tensor lives (no copy to the host).

Two kinds, both exact integer sums (the result does not depend on the reduction's order):

* ``digest_on_device`` / ``raw_hash``: an unkeyed hash, two 47-bit position-keyed sums of mixed
  32-bit words, for what is compared across processes without a judgment's key (weights and
  state at build, the scorer's timed replays). On a GPU the words are mixed by one Triton
  kernel; the CPU path is a torch expression of another function: a digest is only ever
  compared with one made on the same kind of device (the gate keys its recordings by device).
* ``Pending`` (the accuracy gate's tap): one fused check per tensor, keyed per judgment, that
  reads the tensor once for its raw and value hashes and its poison and Inf counts (below).
  Its Triton kernel and its torch path compute the same function.

``raw``: of the stored bits (bit identity). ``value``: of the values with -0 folded into +0
(value identity: only signed zeros differ).
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .numerics import INT_POISON

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


# ------------------------------------------------------------------ the tap's fused check
# What the accuracy gate's tap needs of one tensor, read once by one kernel (the tap checks
# every op call's outputs and state: one launch or more per measure made the full-config pass
# launch-bound, 25-30 s against 0.1 s for the same step without hooks; H200, 2026-12-04):
#
# * ``raw``: a keyed multilinear hash of the stored bits. The tensor is read as elements; each
#   element's bits are cut into 16-bit chunks (8-bit for 1-byte elements), chunk ``q`` of the
#   tensor taking the coefficients ``c_l(q)`` of lane ``l`` (0, 1), and a lane is
#   ``sum_q c_l(q) * chunk_q mod P`` with P = 2**31 - 1 (prime): for two different tensors and
#   coefficients drawn at random the lanes collide with probability about 2**-31 each, 2**-62
#   for the pair, whatever the two tensors are (chunks < P, so no two chunk values agree mod P).
#   ``c_0(q) = mix(q ^ k0)`` and ``c_1(q) = mix(c_0(q) ^ k1)`` (``_mix32``: a bijection of 32-bit
#   words with full avalanche; q's high word is XORed into ``c_0``), the key drawn per judgment
#   (:func:`digest_key`). Why keyed: the lanes are linear in the chunks, so code that knows the
#   coefficients can pick changes that cancel (tests/gates/test_fingerprint.py builds one); with
#   the coefficients unknown it cannot. The key comes from the judgment's hidden input seed
#   (``tap.tap_key``: handed to a side only after the tree is imported; A's and B's sides
#   agree), so its secrecy is the seed's: 32 bits, which code that sees the workload's
#   positions and tokens (sha256 draws of the seed) could search for on a GPU. Forging is
#   still no shortcut: a wrong output made to collide with the right one needs the right one.
#   Integer sums are exact: the result does not depend on the order of the reduction, so A and
#   B (and the GPU and the CPU path) agree bit for bit.
# * ``value``: the same of the values with -0 folded into +0 (floats wider than 8 bits; others:
#   the raw hash), from the same read.
# * ``unwritten``: poison still there (NaN for floats, ``INT_POISON`` for int32/int64), and
#   ``nonfinite``: Inf (floats), both over the rows a ``rows`` mask defines (undefined rows
#   count as zeros in the hashes: what they hold is not the op's work).
#
# Every check adds into a slot of a preallocated device buffer (``Pending``), read back once per
# step: a call costs one launch per tensor and no host sync. On a CPU without Triton's
# interpreter (and on a CPU by default: the interpreter pays ~0.4 ms a launch) the same function
# runs as torch operations; tests/gates/test_fingerprint.py holds the two paths equal.
P31 = (1 << 31) - 1
_SLOT = 8  # int64 per slot: raw lanes, value lanes, unwritten, nonfinite, 2 spare
_CHUNK_SLOTS = 4096
_BLOCK = 2048
_PROGRAMS = 1024  # at most this many programs per check, each looping over its blocks
TRITON_ON_CPU = False  # bench/tools/tap_cost.py: count the GPU's path on the CPU
_INT_OF = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
# dtype -> (smallest NaN pattern of |x|, Inf pattern of |x| (-1: none)) over the sign-less bits
_FLOAT_BITS = {
    torch.float64: (0x7FF0000000000001, 0x7FF0000000000000), torch.float32: (0x7F800001, 0x7F800000),
    torch.bfloat16: (0x7F81, 0x7F80), torch.float16: (0x7C01, 0x7C00),
    torch.float8_e4m3fn: (0x7F, -1), torch.float8_e5m2: (0x7D, 0x7C),
}
_FOLDS = (torch.float64, torch.float32, torch.bfloat16, torch.float16)  # value_view's dtypes


def digest_key(seed: int) -> tuple[int, int]:
    """Pure: the two 32-bit words keying the tap's hashes, from a judgment's hidden draw."""
    h = hashlib.blake2b(f"kern-loop/tap-check/{int(seed)}".encode(), digest_size=8).digest()
    return int.from_bytes(h[:4], "little"), int.from_bytes(h[4:], "little")


@dataclass(frozen=True)
class Check:
    """What the tap learned of one tensor: digest labels (``dtype(shape):hex``) and counts."""

    raw: str
    value: str
    unwritten: int
    nonfinite: int


@dataclass(frozen=True)
class _Kind:
    """A dtype's constants for the check (all compile-time in the kernel)."""

    size: int  # bytes per element
    count: int  # 0: nothing counted; 1: INT_POISON; 2: NaN / Inf
    fold: bool  # value hash folds -0 into +0
    nan_min: int
    inf: int

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def of(dtype: torch.dtype, counts: bool, values: bool) -> "_Kind":
        size = torch.empty((), dtype=dtype).element_size()
        nan_min, inf = _FLOAT_BITS.get(dtype, (-1, -1))
        if not counts:
            count = 0
        elif dtype in _FLOAT_BITS:
            count = 2
        else:
            count = 1 if dtype in (torch.int32, torch.int64) else 0
        return _Kind(size, count, values and dtype in _FOLDS, nan_min, inf)

    @property
    def chunks(self) -> int:
        return max(1, self.size // 2)

    @property
    def chunk_bits(self) -> int:
        return 8 if self.size == 1 else 16


@triton.jit
def _fold31(x):
    # x >= 0 (int64): a smaller number congruent mod 2**31 - 1
    return (x & 0x7FFFFFFF) + (x >> 31)


@triton.jit(do_not_specialize=["n", "row_len", "iters"])  # fewer variants to compile per side
def _check_kernel(x, n, rows, row_len, key, slot, iters,
                  SIZE: tl.constexpr, CH: tl.constexpr, CBITS: tl.constexpr, COUNT: tl.constexpr,
                  FOLD: tl.constexpr, NAN_MIN: tl.constexpr, INF: tl.constexpr,
                  POISON: tl.constexpr, MASKED: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    k0 = tl.load(key).to(tl.uint32)
    k1 = tl.load(key + 1).to(tl.uint32)
    r0 = tl.full([], 0, tl.int64)
    r1 = tl.full([], 0, tl.int64)
    v0 = tl.full([], 0, tl.int64)
    v1 = tl.full([], 0, tl.int64)
    bad = tl.full([], 0, tl.int64)
    inf = tl.full([], 0, tl.int64)
    for it in range(iters):
        e = (pid + it * programs).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        live = e < n
        if MASKED:
            live = live & (tl.load(rows + e // row_len, mask=live, other=0) != 0)
        b = tl.load(x + e, mask=live, other=0).to(tl.int64)  # the bits, sign-extended
        b = tl.where(live, b, 0)
        mag = b & ((1 << (8 * SIZE - 1)) - 1)
        if COUNT == 1:
            bad += tl.sum((live & (b == POISON)).to(tl.int64), axis=0)
        if COUNT == 2:
            bad += tl.sum((live & (mag >= NAN_MIN)).to(tl.int64), axis=0)
            inf += tl.sum((live & (mag == INF)).to(tl.int64), axis=0)
        vb = b
        if FOLD:
            vb = tl.where(b == -(1 << (8 * SIZE - 1)), 0, b)
        for j in tl.static_range(CH):
            q = e * CH + j
            c0 = _mix32(q.to(tl.uint32) ^ k0) ^ (q >> 32).to(tl.uint32)
            c1 = _mix32(c0 ^ k1)
            # 32 x 32 -> 64-bit products (< 2**48): a block's sum stays below 2**63
            m = ((b >> (CBITS * j)) & ((1 << CBITS) - 1)).to(tl.uint32).to(tl.uint64)
            r0 = _fold31(r0 + _fold31(tl.sum(c0.to(tl.uint64) * m, axis=0).to(tl.int64)))
            r1 = _fold31(r1 + _fold31(tl.sum(c1.to(tl.uint64) * m, axis=0).to(tl.int64)))
            if FOLD:
                vm = ((vb >> (CBITS * j)) & ((1 << CBITS) - 1)).to(tl.uint32).to(tl.uint64)
                v0 = _fold31(v0 + _fold31(tl.sum(c0.to(tl.uint64) * vm, axis=0).to(tl.int64)))
                v1 = _fold31(v1 + _fold31(tl.sum(c1.to(tl.uint64) * vm, axis=0).to(tl.int64)))
    if not FOLD:
        v0 = r0
        v1 = r1
    tl.atomic_add(slot, r0)
    tl.atomic_add(slot + 1, r1)
    tl.atomic_add(slot + 2, v0)
    tl.atomic_add(slot + 3, v1)
    if COUNT != 0:
        tl.atomic_add(slot + 4, bad)
        tl.atomic_add(slot + 5, inf)


@dataclass(frozen=True, order=True)
class Variant:
    """What Triton compiles one :func:`_check_kernel` for, as a check of a tensor launches it:
    the kind's constexprs, MASKED, and whether each tensor pointer that varies is 16-byte
    aligned (Triton specializes pointers on that; ``n``, ``row_len`` and ``iters`` are not
    specialized, and ``key``/``slot`` always are aligned: fresh allocations, 64-byte slots).
    A side whose Triton cache holds every variant its tap launches compiles none of them."""

    size: int
    count: int
    fold: bool
    nan_min: int
    inf: int
    masked: bool
    x_aligned: bool
    rows_aligned: bool

    @staticmethod
    def of(t: torch.Tensor, rows, kind: _Kind) -> "Variant":
        # a tensor that is not contiguous is copied first (:func:`_flat_bits`): a fresh
        # allocation, aligned on every allocator here (CPU 64 bytes, CUDA 512)
        def aligned(x):
            return not x.is_contiguous() or x.data_ptr() % 16 == 0

        x = aligned(t)
        return Variant(kind.size, kind.count, kind.fold, kind.nan_min, kind.inf, rows is not None, x,
                       x if rows is None else aligned(rows))


def _flat_bits(t: torch.Tensor, size: int) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(_INT_OF[size])


def _check_triton(t: torch.Tensor, rows, kind: _Kind, key: torch.Tensor, slot: torch.Tensor,
                  programs: int = _PROGRAMS) -> None:
    """Add ``t``'s check into ``slot`` (int64 [_SLOT] on ``t``'s device): one launch."""
    bits = _flat_bits(t, kind.size)
    n = bits.numel()
    blocks = triton.cdiv(n, _BLOCK)
    grid = min(blocks, programs)
    mask = bits if rows is None else rows.reshape(-1).view(torch.uint8)
    _check_kernel[(grid,)](
        bits, n, mask, 1 if rows is None else n // t.shape[0], key, slot,
        triton.cdiv(blocks, grid), SIZE=kind.size, CH=kind.chunks, CBITS=kind.chunk_bits,
        COUNT=kind.count, FOLD=kind.fold, NAN_MIN=kind.nan_min, INF=kind.inf, POISON=INT_POISON,
        MASKED=rows is not None, BLOCK=_BLOCK, num_warps=8)


def _mix64(x: torch.Tensor) -> torch.Tensor:
    return _mix(x & _M)


class _Coefficients:
    """The plain-torch path's coefficients ``c_0(q), c_1(q)`` for q < len, grown on demand
    (they depend on the key alone, so one vector serves every tensor)."""

    def __init__(self, key: tuple[int, int], device):
        self.key, self.device = key, device
        self.c = torch.empty(2, 0, dtype=torch.int64, device=device)

    def __call__(self, count: int) -> torch.Tensor:
        if self.c.shape[1] < count:
            q = torch.arange(max(count, 2 * self.c.shape[1]), dtype=torch.int64, device=self.device)
            c0 = _mix64((q & _M) ^ self.key[0]) ^ (q >> 32)
            self.c = torch.stack([c0, _mix64(c0 ^ self.key[1])])
        return self.c[:, :count]


def _fold(x: torch.Tensor) -> torch.Tensor:
    return (x & P31) + (x >> 31)


def _check_torch(t: torch.Tensor, rows, kind: _Kind, coef: _Coefficients) -> torch.Tensor:
    """The kernel's function as torch operations: int64 [_SLOT] (lanes congruent mod P31)."""
    b = _flat_bits(t, kind.size).to(torch.int64)
    n = b.numel()
    live = None
    if rows is not None:
        live = rows.reshape(-1).repeat_interleave(n // rows.numel())
        b = torch.where(live, b, 0)
    out = torch.zeros(_SLOT, dtype=torch.int64, device=t.device)
    if kind.count:
        mag = b & ((1 << (8 * kind.size - 1)) - 1)
        bad = (b == INT_POISON) if kind.count == 1 else (mag >= kind.nan_min)
        inf = (mag == kind.inf) if kind.count == 2 else torch.zeros_like(bad)
        if live is not None:
            bad, inf = bad & live, inf & live
        out[4], out[5] = bad.sum(), inf.sum()
    c = coef(n * kind.chunks)
    shifts = torch.arange(kind.chunks, device=t.device, dtype=torch.int64) * kind.chunk_bits
    cmask = (1 << kind.chunk_bits) - 1

    def lanes(bits):
        m = ((bits[:, None] >> shifts) & cmask).reshape(1, -1)
        return _fold(c * m).sum(1)

    out[0:2] = lanes(b)
    out[2:4] = lanes(torch.where(b == -(1 << (8 * kind.size - 1)), 0, b)) if kind.fold else out[0:2]
    return out


def _label(dtype, shape, a: int, b: int) -> str:
    return f"{dtype}{shape}:{a % P31:08x}{b % P31:08x}"


class Pending:
    """The tap's checks, queued on the device and read back in one sync per step (a tap
    checks thousands of op outputs per step; one host sync each would dominate its time).
    Each :meth:`check` adds into a slot of a preallocated buffer: one kernel per tensor."""

    def __init__(self, device, key: tuple[int, int]):
        # the device as tensors report it ('cuda' names no index; a tensor's is 'cuda:0')
        self.device = torch.empty(0, device=device).device
        self._triton = self.device.type == "cuda" or TRITON_ON_CPU
        self._key = torch.tensor(key, dtype=torch.int64, device=self.device)
        self._coef = None if self._triton else _Coefficients(key, self.device)
        self._bufs: list[torch.Tensor] = []
        self._meta: list = []  # per slot: (dtype, shape)
        # every kernel variant this object's checks launch (or would launch, on the torch
        # path): what main's compile side must have compiled (gates/side/driver.py)
        self.variants: set[Variant] = set()

    def check(self, t: torch.Tensor, rows: torch.Tensor | None = None, values: bool = True,
              counts: bool = True) -> int:
        """Queue the check of ``t`` (``rows``: bool mask over its first dimension, the rows it
        defines; ``values``: a value hash too; ``counts``: poison and Inf counted); returns
        the index of its :class:`Check` in :meth:`resolve`'s list."""
        if t.device != self.device:
            raise ValueError(f"tap check: expected a tensor on {self.device}, got one on "
                             f"{t.device} (a gate bug)")
        if rows is not None and (rows.dtype != torch.bool or rows.numel() != t.shape[0]):
            raise ValueError(f"tap check: expected a bool mask of {t.shape[0]} rows, got "
                             f"{rows.dtype} of {rows.numel()} (a gate bug)")
        i = len(self._meta)
        if i // _CHUNK_SLOTS == len(self._bufs):
            self._bufs.append(torch.zeros(_CHUNK_SLOTS, _SLOT, dtype=torch.int64, device=self.device))
        slot = self._bufs[i // _CHUNK_SLOTS][i % _CHUNK_SLOTS]
        self._meta.append((t.dtype, tuple(t.shape)))
        if t.numel():
            kind = _Kind.of(t.dtype, counts, values)
            self.variants.add(Variant.of(t, rows, kind))
            if self._triton:
                _check_triton(t, rows, kind, self._key, slot)
            else:
                slot.copy_(_check_torch(t, rows, kind, self._coef))
        return i

    def resolve(self) -> list[Check]:
        """Every check queued since the last call, in order (one host sync)."""
        n = len(self._meta)
        if not n:
            return []
        used = [b[:min(_CHUNK_SLOTS, n - k * _CHUNK_SLOTS)] for k, b in enumerate(self._bufs)
                if k * _CHUNK_SLOTS < n]
        flat = (used[0] if len(used) == 1 else torch.cat(used)).tolist()
        for u in used:
            u.zero_()
        out = [Check(_label(d, s, v[0], v[1]), _label(d, s, v[2], v[3]), v[4], v[5])
               for (d, s), v in zip(self._meta, flat)]
        self._meta.clear()
        return out

    def now(self, t: torch.Tensor, rows: torch.Tensor | None = None) -> Check:
        """:meth:`check` of ``t`` alone, read back at once (nothing else may be queued)."""
        if self._meta:
            raise ValueError("tap check: now() with checks queued (a gate bug)")
        self.check(t, rows)
        return self.resolve()[0]
