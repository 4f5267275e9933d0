"""How two tensors differ: the measures every gate and kernel test uses. Pure functions.

* ``poison``: fill an output before a call so an unwritten element is visible afterwards
  (NaN for floats, a sentinel for integers).
* ``compare``: elements differing, max difference in ulps of the reference, relative RMS,
  NaN/Inf counts and whether only signed zeros differ.
* ``written_rows``: the rows of a cache (``_is_big``: too large to copy whole) that a call
  changed, so a cache is compared by what the call wrote (the tap, the reference check).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

INT_POISON = -0x5A5A5A5A  # fits int32 and int64; no valid index or count is negative this far
_MANTISSA_BITS = {
    torch.float32: 23, torch.bfloat16: 7, torch.float16: 10, torch.float64: 52,
    torch.float8_e4m3fn: 3, torch.float8_e5m2: 2,
}
_MIN_EXP = {
    torch.float32: -126, torch.bfloat16: -126, torch.float16: -14, torch.float64: -1022,
    torch.float8_e4m3fn: -6, torch.float8_e5m2: -14,
}


def poison_fresh_memory() -> None:
    """From now on every ``torch.empty`` in this process is filled with NaN (floats) or the
    dtype's largest value (integers), so a kernel that reads memory nobody wrote reads poison.

    Without it a fresh CPU allocation is often an untouched zero page, so a kernel that uses an
    uninitialised buffer as if it were zeroed passes every comparison. PyTorch does the filling
    only in its deterministic mode; ``warn_only`` keeps ops without a deterministic variant
    running (with a warning) instead of raising."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` in place with a value no correct kernel writes."""
    if t.dtype.is_floating_point:
        if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            t.view(torch.uint8).fill_(0x7F)  # NaN in both fp8 formats
        else:
            t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    elif t.dtype == torch.uint8:
        t.fill_(0xA5)
    else:
        t.fill_(INT_POISON)
    return t


def unwritten(t: torch.Tensor) -> int:
    """Elements of an output that still hold the poison value."""
    if t.dtype.is_floating_point:
        return int(torch.isnan(t.float()).sum())
    if t.dtype == torch.uint8:
        return 0  # no uint8 outputs exist; a byte cannot carry a reliable poison
    return int((t == INT_POISON).sum())


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Size of one unit in the last place of ``dtype`` at the magnitude of ``x`` (f64)."""
    m = _MANTISSA_BITS.get(dtype, 23)
    lo = _MIN_EXP.get(dtype, -126)
    mag = x.double().abs()
    exp = torch.floor(torch.log2(torch.where(mag > 0, mag, torch.ones_like(mag))))
    exp = torch.where(mag > 0, exp, torch.full_like(exp, lo)).clamp_min(lo)
    return torch.exp2(exp - m)


@dataclass(frozen=True)
class Diff:
    numel: int
    differing: int  # elements whose bytes differ
    max_ulp: float
    rel_rms: float
    nan: int  # NaN in the candidate where the reference has none
    inf: int
    signed_zero_only: bool  # every differing element is +0 vs -0
    float: bool = True  # a floating-point tensor (max_ulp/rel_rms meaningful)

    @property
    def identical(self) -> bool:
        return self.differing == 0

    def as_dict(self) -> dict:
        return asdict(self)


def compare(ref: torch.Tensor, got: torch.Tensor, mask: torch.Tensor | None = None) -> Diff:
    """Compare ``got`` with ``ref`` (same shape and dtype). ``mask`` selects the first-dim
    rows that are defined; other rows are ignored."""
    if ref.shape != got.shape or ref.dtype != got.dtype:
        raise ValueError(f"compare: expected {tuple(ref.shape)} {ref.dtype}, "
                         f"got {tuple(got.shape)} {got.dtype}")
    if mask is not None:
        ref, got = ref[mask], got[mask]
    if ref.numel() == 0:
        return Diff(0, 0, 0.0, 0.0, 0, 0, True)
    differing_mask = _element_differs(ref, got)
    differing = int(differing_mask.sum())
    if not ref.dtype.is_floating_point:
        return Diff(ref.numel(), differing, float(differing > 0), differing / ref.numel(), 0, 0,
                    False, float=False)
    r, g = ref.double(), got.double()
    nan = int((torch.isnan(g) & ~torch.isnan(r)).sum())
    inf = int((torch.isinf(g) & ~torch.isinf(r)).sum())
    finite = torch.isfinite(r) & torch.isfinite(g)
    err = (r - g).abs()
    ulps = torch.where(finite, err / ulp(r, ref.dtype), torch.zeros_like(err))
    same_inf = torch.isinf(r) & (r == g)
    bad = ~finite & ~same_inf & ~(torch.isnan(r) & torch.isnan(g))
    max_ulp = float("inf") if bool(bad.any()) else float(ulps.max())
    rf, ef = torch.where(finite, r, 0.0), torch.where(finite, err, 0.0)
    denom = float(rf.pow(2).mean().sqrt())
    num = float(ef.pow(2).mean().sqrt())
    rel = num / denom if denom > 0 else (0.0 if num == 0 else float("inf"))
    if bool(bad.any()):
        rel = float("inf")
    zero_only = differing > 0 and bool(((r[differing_mask] == 0) & (g[differing_mask] == 0)).all())
    return Diff(ref.numel(), differing, max_ulp, rel, nan, inf, zero_only)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _element_differs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per element: do the stored bytes differ?"""
    size = a.element_size()
    ab = _bytes(a).reshape(-1, size)
    bb = _bytes(b).reshape(-1, size)
    return (ab != bb).any(dim=1).reshape(a.shape)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bytes(a), _bytes(b))


def _is_big(t: torch.Tensor) -> bool:
    """Caches: tensors of pages (kept as the rows a call writes, not whole)."""
    return t.dim() >= 2 and t.numel() > (1 << 22)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """A big state tensor as ``[rows, bytes]`` (a row = its last dimension)."""
    return t.reshape(-1, t.shape[-1]).view(torch.uint8).reshape(-1, t.shape[-1] * t.element_size())


def written_rows(before: torch.Tensor, after: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(row indices, their new contents) of a big state tensor that a call changed."""
    changed = (_rows(before) != _rows(after)).any(dim=1).nonzero().flatten()
    return changed, after.reshape(-1, after.shape[-1])[changed].clone()
