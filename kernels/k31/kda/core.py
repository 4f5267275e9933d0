"""kda.core: one decode step of Kimi Delta Attention for every (row, local head), fused.

Shapes (``I = heads * D``): ``qkv [rows, 3I]`` (q | k | v, each ``[heads, D]``), ``gate [rows, I]``
(a strided view of the fused projection), ``beta [rows, >= heads]`` (the first ``heads`` columns
of the ab projection are read), ``g [rows, I]``, ``dt_bias [I]``, ``a_log [heads]``,
``gamma [D]`` (or ``[heads, D]``), ``state [rows, heads, D(v), D(k)]`` in bf16 or f32 (updated in
place), ``o [rows, I]`` bf16.

Design: grid ``(rows * heads, split)`` (under the interpreter one program takes every (row, head)
pair, ``G`` of them, as axis 0 of its tiles: see ``platform.FEW_PROGRAMS``; on a GPU G = 1).
A program loads q, k (full dk), its ``D / split`` slice of
v, the per-channel decay inputs and its ``[D/split, D]`` state tile (rows contiguous in dk, so
the loads are coalesced), and does in registers: q/k L2 norm, q scale, sigmoid(beta),
``decay = exp(-5 sigmoid(exp(a_log) (g + dt_bias)))``, ``S *= decay[k]``, ``m = S k``,
``delta = (v - m) beta``, ``S += delta k^T``, ``o = S q``. The state is read once and written
once in its own dtype (the HBM floor of the op). With ``split == 1`` the per-head RMSNorm
(gamma) and the sigmoid output gate are fused too; with ``split > 1`` the unnormalized ``o``
goes to an f32 scratch (allocated once per shape) and a small second kernel applies norm x gate.
``dv_chunk`` < slice walks the slice in chunks of state rows (fewer registers per program; the
fused norm then collects the chunks' ``o`` in a small ``[chunks, dv_chunk]`` register tile).
Mat-vecs are broadcast-multiply + row reductions (a one-token step has no matrix product).
Registers on sm_90 (triton 3.9 AOT, bf16/f32 state): full 128 x 128 tile at 8 warps 144/160,
no spill; dv_chunk 32 at 8 warps 95/74; split 16 (8-row slices) at 2 warps 64.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import platform, scratch, tunables
from ..platform import INTERPRET, cdiv, next_pow2
from ..rounding import rounded


@triton.jit
def _core_kernel(qkv_ptr, qkv_rs, gate_ptr, gate_rs, beta_ptr, beta_rs, g_ptr, g_rs,
                 dt_ptr, alog_ptr, gamma_ptr, gamma_hs,
                 st_ptr, st_rs, st_hs, st_vs, o_ptr, o_rs, part_ptr,
                 n_pairs, HEADS, D, eps, q_scale,
                 G: tl.constexpr, BD: tl.constexpr, BV: tl.constexpr, BVC: tl.constexpr,
                 FUSE_NORM: tl.constexpr, RNE: tl.constexpr):
    """Program (pb, vb) owns state rows [vb * BV, (vb + 1) * BV) of the G (row, head) pairs
    ``pb * G .. pb * G + G - 1`` (pair = row * HEADS + head; G = 1 on a GPU) and walks them BVC
    rows at a time (BVC == BV: the whole slice at once). Tiles carry the pair as axis 0:
    ``[G, BD]`` vectors, ``[G, BVC, BD]`` state."""
    NCH: tl.constexpr = BV // BVC
    pair = tl.program_id(0) * G + tl.arange(0, G)
    vb = tl.program_id(1)
    live = pair < n_pairs
    row = pair // HEADS
    head = pair % HEADS
    inner = HEADS * D
    offs_k = tl.arange(0, BD)
    mk = live[:, None] & (offs_k < D)[None, :]

    src = (qkv_ptr + row * qkv_rs + head * D)[:, None]
    q = tl.load(src + offs_k[None, :], mask=mk, other=0.0).to(tl.float32)
    k = tl.load(src + inner + offs_k[None, :], mask=mk, other=0.0).to(tl.float32)
    q = q * (q_scale / tl.sqrt(tl.sum(q * q, axis=1) + 1e-6))[:, None]
    k = k * (1.0 / tl.sqrt(tl.sum(k * k, axis=1) + 1e-6))[:, None]
    beta = tl.load(beta_ptr + row * beta_rs + head, mask=live, other=0.0).to(tl.float32)
    b = 1.0 / (1.0 + tl.exp(-beta))
    gg = (tl.load(g_ptr + (row * g_rs + head * D)[:, None] + offs_k[None, :], mask=mk,
                  other=0.0).to(tl.float32)
          + tl.load(dt_ptr + (head * D)[:, None] + offs_k[None, :], mask=mk, other=0.0).to(tl.float32))
    a = tl.exp(tl.load(alog_ptr + head, mask=live, other=0.0).to(tl.float32))
    decay = tl.exp(-5.0 / (1.0 + tl.exp(-a[:, None] * gg)))

    st_head = (st_ptr + row * st_rs + head * st_hs)[:, None, None]
    chunk = tl.arange(0, NCH)
    o_all = tl.zeros([G, NCH, BVC], tl.float32)  # the slice's o, one chunk per line (fused norm)
    for c in range(NCH):
        offs_v = vb * BV + c * BVC + tl.arange(0, BVC)
        mv = live[:, None] & (offs_v < D)[None, :]
        v = tl.load(src + 2 * inner + offs_v[None, :], mask=mv, other=0.0).to(tl.float32)
        st = st_head + offs_v[None, :, None] * st_vs + offs_k[None, None, :]
        m3 = mv[:, :, None] & mk[:, None, :]
        s = tl.load(st, mask=m3, other=0.0).to(tl.float32)
        s = s * decay[:, None, :]
        m = tl.sum(s * k[:, None, :], axis=2)
        delta = (v - m) * b[:, None]
        s = s + delta[:, :, None] * k[:, None, :]
        o = tl.sum(s * q[:, None, :], axis=2)
        tl.store(st, rounded(s, st_ptr.dtype.element_ty, RNE), mask=m3)
        if FUSE_NORM:
            o_all = tl.where(chunk[None, :, None] == c, o[:, None, :], o_all)
        else:
            tl.store(part_ptr + (row * inner + head * D)[:, None] + offs_v[None, :], o, mask=mv)

    if FUSE_NORM:  # BV == BD here: o_all holds each head's whole output
        offs_o = (chunk[:, None] * BVC + tl.arange(0, BVC)[None, :])[None, :, :]
        mo = live[:, None, None] & (offs_o < D)
        o_all = tl.where(mo, o_all, 0.0)
        r = 1.0 / tl.sqrt(tl.sum(tl.sum(o_all * o_all, axis=2), axis=1) / D + eps)
        gam = tl.load(gamma_ptr + (head * gamma_hs)[:, None, None] + offs_o, mask=mo,
                      other=0.0).to(tl.float32)
        gt = tl.load(gate_ptr + (row * gate_rs + head * D)[:, None, None] + offs_o, mask=mo,
                     other=0.0).to(tl.float32)
        out = o_all * r[:, None, None] * gam / (1.0 + tl.exp(-gt))
        tl.store(o_ptr + (row * o_rs + head * D)[:, None, None] + offs_o,
                 rounded(out, o_ptr.dtype.element_ty, RNE), mask=mo)


@triton.jit
def _norm_gate_kernel(part_ptr, gate_ptr, gate_rs, gamma_ptr, gamma_hs, o_ptr, o_rs,
                      HEADS, D, eps, BD: tl.constexpr, RNE: tl.constexpr):
    """Split path, second step: per-head RMSNorm x gamma x sigmoid(gate) of the f32 partials."""
    pid = tl.program_id(0)
    row = pid // HEADS
    head = pid % HEADS
    offs = tl.arange(0, BD)
    mv = offs < D
    o = tl.load(part_ptr + row * HEADS * D + head * D + offs, mask=mv, other=0.0)
    r = 1.0 / tl.sqrt(tl.sum(o * o, axis=0) / D + eps)
    gam = tl.load(gamma_ptr + head * gamma_hs + offs, mask=mv, other=0.0).to(tl.float32)
    gt = tl.load(gate_ptr + row * gate_rs + head * D + offs, mask=mv, other=0.0).to(tl.float32)
    out = o * r * gam / (1.0 + tl.exp(-gt))
    tl.store(o_ptr + row * o_rs + head * D + offs, rounded(out, o_ptr.dtype.element_ty, RNE), mask=mv)


def kda_core(sh, *, qkv, gate, beta, g, dt_bias, a_log, gamma, state, o) -> None:
    rows = qkv.shape[0]
    heads, D = sh.kda_heads, sh.dims.kda_head_dim
    inner = heads * D
    assert state.shape == (rows, heads, D, D) and state.stride(3) == 1, \
        f"kda_core: state {tuple(state.shape)} stride {state.stride()}"
    for t in (qkv, gate, g, o):
        assert t.stride(-1) == 1
    assert beta.shape[1] >= heads and dt_bias.numel() == inner and a_log.numel() == heads
    assert dt_bias.is_contiguous() and a_log.is_contiguous() and gamma.is_contiguous()
    # gamma [D] is shared by every head; [heads, D] is per head
    gamma_hs = D if gamma.numel() == inner else 0
    assert gamma.numel() in (D, inner)
    if rows == 0:
        return
    BD = next_pow2(D)
    if platform.FEW_PROGRAMS:  # interpreter: every (row, head) pair and whole state in one program
        split, G, BVC = 1, next_pow2(rows * heads), BD
    else:
        split, G = tunables.get("kda.core.split_v"), 1
        if rows > tunables.get("kda.core.split_rows_max") or split > BD:
            split = 1
        BVC = min(BD // split, tunables.get("kda.core.dv_chunk"))
    fuse = split == 1
    BV = BD // split
    # f32 unnormalized outputs of the split path (o itself is an unused pointer when fused)
    part = o if fuse else scratch.empty("kda.core.o_part", o.device, (rows, inner), torch.float32)
    _core_kernel[(cdiv(rows * heads, G), split)](
        qkv, qkv.stride(0), gate, gate.stride(0), beta, beta.stride(0), g, g.stride(0),
        dt_bias, a_log, gamma, gamma_hs,
        state, state.stride(0), state.stride(1), state.stride(2), o, o.stride(0), part,
        rows * heads, heads, D, float(sh.dims.eps), float(D ** -0.5),
        G=G, BD=BD, BV=BV, BVC=BVC, FUSE_NORM=fuse, RNE=INTERPRET,
        num_warps=tunables.get("kda.core.num_warps" if fuse else "kda.core.split_num_warps"))
    if not fuse:
        _norm_gate_kernel[(rows * heads,)](
            part, gate, gate.stride(0), gamma, gamma_hs, o, o.stride(0), heads, D,
            float(sh.dims.eps), BD=BD, RNE=INTERPRET, num_warps=tunables.get("kda.core.norm_num_warps"))
