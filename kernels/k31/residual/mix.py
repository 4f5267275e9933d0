"""residual.mix: attention-residual mix over block snapshots, then RMSNorm (see
``reference.residual_mix``).

Shapes: ``snaps [max_snap, rows, H]`` bf16 (state), ``partial [rows, H]`` f32 (state),
``delta``/``delta2 [rows, H]`` bf16 or None, ``sw [H]``, ``norm_w [H]``, ``x [rows, H]`` bf16.
Statics: ``n_snap`` (completed snapshots before this call), ``use_partial``, ``close_block``.

Design: one program per row holding whole ``H``-wide vectors in registers (``next_pow2(H)``
lanes), so every byte is moved once and the mix is a single pass over memory:

1. ``p = partial + delta + delta2`` (f32); store the new partial (``p``, or zeros when the
   block closes); on ``close_block`` store ``bf16(p)`` as snapshot ``n_snap``.
2. Candidates in turn (the partial or the closed snapshot first, then snapshots
   ``0..n_snap-1``): score ``rsqrt(mean(c^2) + eps) * (c . sw)``, folded into an online
   softmax (running max, running denominator, rescaled running ``h``), so each snapshot is
   loaded exactly once.
3. ``x = rms_norm(h / denominator) * norm_w`` in bf16.

``n_snap`` is a runtime loop bound (one compiled variant per (use_partial, close_block,
delta presence)), not a compile-time constant.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import tunables
from ..platform import INTERPRET, next_pow2


@triton.jit
def _rounded(x, dtype: tl.constexpr, RNE: tl.constexpr):
    """``x`` (f32) cast to ``dtype``. With ``RNE`` (set under the interpreter only) an f32 ->
    bf16 cast rounds to nearest even by hand: the interpreter's own cast truncates, which would
    bias every bf16 result by up to an ulp. On a GPU the plain cast already rounds to nearest."""
    if RNE:
        if dtype == tl.bfloat16:
            u = x.to(tl.uint32, bitcast=True)
            u = u + 0x7FFF + ((u >> 16) & 1)
            x = ((u >> 16) << 16).to(tl.float32, bitcast=True)  # exact in bf16: the cast keeps it
    return x.to(dtype)


@triton.jit
def _mix_kernel(snap_ptr, snap_ss, snap_rs, part_ptr, part_rs, d_ptr, d_rs, d2_ptr, d2_rs,
                sw_ptr, nw_ptr, x_ptr, x_rs, n_snap, H, eps,
                HAS_D: tl.constexpr, HAS_D2: tl.constexpr, CLOSE: tl.constexpr,
                PARTIAL_CAND: tl.constexpr, BH: tl.constexpr, RNE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BH)
    mh = offs < H
    p = tl.load(part_ptr + row * part_rs + offs, mask=mh, other=0.0).to(tl.float32)
    if HAS_D:
        p += tl.load(d_ptr + row * d_rs + offs, mask=mh, other=0.0).to(tl.float32)
    if HAS_D2:
        p += tl.load(d2_ptr + row * d2_rs + offs, mask=mh, other=0.0).to(tl.float32)
    sw = tl.load(sw_ptr + offs, mask=mh, other=0.0).to(tl.float32)
    snap_row = snap_ptr + row * snap_rs

    if CLOSE:
        pb = _rounded(p, snap_ptr.dtype.element_ty, RNE)
        tl.store(snap_row + n_snap * snap_ss + offs, pb, mask=mh)
        tl.store(part_ptr + row * part_rs + offs,
                 tl.zeros([BH], tl.float32).to(part_ptr.dtype.element_ty), mask=mh)
        cand = pb.to(tl.float32)
    else:
        tl.store(part_ptr + row * part_rs + offs, _rounded(p, part_ptr.dtype.element_ty, RNE), mask=mh)
        cand = p

    if PARTIAL_CAND:
        # the partial (or the block just closed) is the first candidate
        run_max = tl.sum(cand * sw, axis=0) / tl.sqrt(tl.sum(cand * cand, axis=0) / H + eps)
        run_den = tl.full([], 1.0, tl.float32)
        h = cand
    else:
        run_max = tl.full([], float("-inf"), tl.float32)
        run_den = tl.full([], 0.0, tl.float32)
        h = tl.zeros([BH], tl.float32)

    for i in range(n_snap):
        c = tl.load(snap_row + i * snap_ss + offs, mask=mh, other=0.0).to(tl.float32)
        score = tl.sum(c * sw, axis=0) / tl.sqrt(tl.sum(c * c, axis=0) / H + eps)
        new_max = tl.maximum(run_max, score)
        keep = tl.exp(run_max - new_max)
        take = tl.exp(score - new_max)
        h = h * keep + c * take
        run_den = run_den * keep + take
        run_max = new_max

    h = h / run_den
    r = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / H + eps)
    nw = tl.load(nw_ptr + offs, mask=mh, other=0.0).to(tl.float32)
    tl.store(x_ptr + row * x_rs + offs, _rounded(h * r * nw, x_ptr.dtype.element_ty, RNE), mask=mh)


def residual_mix(sh, *, snaps, partial, delta, delta2, sw, norm_w, x,
                 n_snap: int, use_partial: bool, close_block: bool) -> None:
    rows, H = partial.shape
    assert snaps.shape[1:] == (rows, H) and snaps.stride(2) == 1 and partial.stride(1) == 1
    assert x.stride(1) == 1 and sw.is_contiguous() and norm_w.is_contiguous()
    if close_block:
        assert n_snap < snaps.shape[0], f"residual_mix: no snapshot slot {n_snap} to close into"
    assert n_snap >= 1 or use_partial or close_block, "residual_mix: no candidate to mix"
    for t in (delta, delta2):
        assert t is None or (t.shape == (rows, H) and t.stride(1) == 1)
    if rows == 0:
        return
    d = delta if delta is not None else partial  # placeholder pointer, never read
    d2 = delta2 if delta2 is not None else partial
    _mix_kernel[(rows,)](
        snaps, snaps.stride(0), snaps.stride(1), partial, partial.stride(0),
        d, d.stride(0), d2, d2.stride(0), sw, norm_w, x, x.stride(0),
        int(n_snap), H, float(sh.dims.eps),
        HAS_D=delta is not None, HAS_D2=delta2 is not None,
        CLOSE=bool(close_block), PARTIAL_CAND=bool(close_block or use_partial), BH=next_pow2(H), RNE=INTERPRET,
        num_warps=tunables.get("residual.mix.num_warps"))
