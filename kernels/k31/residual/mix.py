"""residual.mix: attention-residual mix over block snapshots, then RMSNorm (see
``reference.residual_mix``).

Shapes: ``snaps [max_snap, rows, H]`` bf16 (state), ``partial [rows, H]`` f32 (state),
``delta``/``delta2 [rows, H]`` bf16 or None, ``sw [H]``, ``norm_w [H]``, ``x [rows, H]`` bf16.
Statics: ``n_snap`` (completed snapshots before this call), ``use_partial``, ``close_block``.

Design: one program per row (on a GPU; under the interpreter one program takes the whole batch,
``BLOCK_R`` rows, see ``platform.FEW_PROGRAMS``) holding whole ``H``-wide vectors in registers
(``next_pow2(H)`` lanes), so every byte is moved once and the mix is a single pass over memory:

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

from .. import platform, tunables
from ..platform import INTERPRET, cdiv, next_pow2
from ..rounding import rounded


@triton.jit
def _mix_kernel(snap_ptr, snap_ss, snap_rs, part_ptr, part_rs, d_ptr, d_rs, d2_ptr, d2_rs,
                sw_ptr, nw_ptr, x_ptr, x_rs, n_snap, rows, H, eps,
                HAS_D: tl.constexpr, HAS_D2: tl.constexpr, CLOSE: tl.constexpr,
                PARTIAL_CAND: tl.constexpr, BH: tl.constexpr, BLOCK_R: tl.constexpr,
                RNE: tl.constexpr):
    """Program ``pid`` mixes rows ``[pid * BLOCK_R, (pid + 1) * BLOCK_R)``; every vector below is
    ``[BLOCK_R, BH]`` (one row per line) and every per-row scalar ``[BLOCK_R]``."""
    row = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    offs = tl.arange(0, BH)
    mh = offs < H
    m2 = (row < rows)[:, None] & mh[None, :]
    cols = offs[None, :]
    p = tl.load(part_ptr + row[:, None] * part_rs + cols, mask=m2, other=0.0).to(tl.float32)
    if HAS_D:
        p += tl.load(d_ptr + row[:, None] * d_rs + cols, mask=m2, other=0.0).to(tl.float32)
    if HAS_D2:
        p += tl.load(d2_ptr + row[:, None] * d2_rs + cols, mask=m2, other=0.0).to(tl.float32)
    sw = tl.load(sw_ptr + offs, mask=mh, other=0.0).to(tl.float32)[None, :]
    snap_row = snap_ptr + row[:, None] * snap_rs + cols

    if CLOSE:
        pb = rounded(p, snap_ptr.dtype.element_ty, RNE)
        tl.store(snap_row + n_snap * snap_ss, pb, mask=m2)
        tl.store(part_ptr + row[:, None] * part_rs + cols,
                 tl.zeros([BLOCK_R, BH], tl.float32).to(part_ptr.dtype.element_ty), mask=m2)
        cand = pb.to(tl.float32)
    else:
        tl.store(part_ptr + row[:, None] * part_rs + cols, rounded(p, part_ptr.dtype.element_ty, RNE),
                 mask=m2)
        cand = p

    if PARTIAL_CAND:
        # the partial (or the block just closed) is the first candidate
        run_max = tl.sum(cand * sw, axis=1) / tl.sqrt(tl.sum(cand * cand, axis=1) / H + eps)
        run_den = tl.full([BLOCK_R], 1.0, tl.float32)
        h = cand
    else:
        run_max = tl.full([BLOCK_R], float("-inf"), tl.float32)
        run_den = tl.full([BLOCK_R], 0.0, tl.float32)
        h = tl.zeros([BLOCK_R, BH], tl.float32)

    for i in range(n_snap):
        c = tl.load(snap_row + i * snap_ss, mask=m2, other=0.0).to(tl.float32)
        score = tl.sum(c * sw, axis=1) / tl.sqrt(tl.sum(c * c, axis=1) / H + eps)
        new_max = tl.maximum(run_max, score)
        keep = tl.exp(run_max - new_max)
        take = tl.exp(score - new_max)
        h = h * keep[:, None] + c * take[:, None]
        run_den = run_den * keep + take
        run_max = new_max

    h = h / run_den[:, None]
    r = 1.0 / tl.sqrt(tl.sum(h * h, axis=1) / H + eps)
    nw = tl.load(nw_ptr + offs, mask=mh, other=0.0).to(tl.float32)[None, :]
    tl.store(x_ptr + row[:, None] * x_rs + cols,
             rounded(h * r[:, None] * nw, x_ptr.dtype.element_ty, RNE), mask=m2)


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
    # GPU: one row per program; interpreter: the whole batch in one program
    block_r = next_pow2(rows) if platform.FEW_PROGRAMS else 1
    _mix_kernel[(cdiv(rows, block_r),)](
        snaps, snaps.stride(0), snaps.stride(1), partial, partial.stride(0),
        d, d.stride(0), d2, d2.stride(0), sw, norm_w, x, x.stride(0),
        int(n_snap), rows, H, float(sh.dims.eps),
        HAS_D=delta is not None, HAS_D2=delta2 is not None,
        CLOSE=bool(close_block), PARTIAL_CAND=bool(close_block or use_partial), BH=next_pow2(H),
        BLOCK_R=block_r, RNE=INTERPRET, num_warps=tunables.get("residual.mix.num_warps"))
