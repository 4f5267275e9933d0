"""kda.core: one decode step of Kimi Delta Attention for every (row, local head), fused.

Shapes (``I = heads * D``): ``qkv [rows, 3I]`` (q | k | v, each ``[heads, D]``), ``gate [rows, I]``
(a strided view of the fused projection), ``beta [rows, >= heads]`` (the first ``heads`` columns
of the ab projection are read), ``g [rows, I]``, ``dt_bias [I]``, ``a_log [heads]``,
``gamma [D]`` (or ``[heads, D]``), ``state [rows, heads, D(v), D(k)]`` in bf16 or f32 (updated in
place), ``o [rows, I]`` bf16.

Design: grid ``(rows * heads, split)``. A program loads q, k (full dk), its ``D / split`` slice of
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

from .. import tunables
from ..platform import INTERPRET, next_pow2

_SCRATCH: dict[tuple, torch.Tensor] = {}


def _o_scratch(device, rows: int, inner: int) -> torch.Tensor:
    """f32 ``[rows, inner]`` for unnormalized outputs of the split path; allocated on the first
    (eager) call of a shape so that captured calls allocate nothing."""
    key = (str(device), rows, inner)
    buf = _SCRATCH.get(key)
    if buf is None:
        buf = torch.empty(rows, inner, device=device, dtype=torch.float32)
        _SCRATCH[key] = buf
    return buf


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
def _core_kernel(qkv_ptr, qkv_rs, gate_ptr, gate_rs, beta_ptr, beta_rs, g_ptr, g_rs,
                 dt_ptr, alog_ptr, gamma_ptr, gamma_hs,
                 st_ptr, st_rs, st_hs, st_vs, o_ptr, o_rs, part_ptr,
                 HEADS, D, eps, q_scale,
                 BD: tl.constexpr, BV: tl.constexpr, BVC: tl.constexpr,
                 FUSE_NORM: tl.constexpr, RNE: tl.constexpr):
    """Program (row * HEADS + head, vb) owns state rows [vb * BV, (vb + 1) * BV) of that head
    and walks them BVC rows at a time (BVC == BV: the whole slice at once)."""
    NCH: tl.constexpr = BV // BVC
    pid = tl.program_id(0)
    vb = tl.program_id(1)
    row = pid // HEADS
    head = pid % HEADS
    inner = HEADS * D
    offs_k = tl.arange(0, BD)
    mk = offs_k < D

    src = qkv_ptr + row * qkv_rs + head * D
    q = tl.load(src + offs_k, mask=mk, other=0.0).to(tl.float32)
    k = tl.load(src + inner + offs_k, mask=mk, other=0.0).to(tl.float32)
    q = q * (q_scale / tl.sqrt(tl.sum(q * q, axis=0) + 1e-6))
    k = k * (1.0 / tl.sqrt(tl.sum(k * k, axis=0) + 1e-6))
    b = 1.0 / (1.0 + tl.exp(-tl.load(beta_ptr + row * beta_rs + head).to(tl.float32)))
    gg = (tl.load(g_ptr + row * g_rs + head * D + offs_k, mask=mk, other=0.0).to(tl.float32)
          + tl.load(dt_ptr + head * D + offs_k, mask=mk, other=0.0).to(tl.float32))
    a = tl.exp(tl.load(alog_ptr + head).to(tl.float32))
    decay = tl.exp(-5.0 / (1.0 + tl.exp(-a * gg)))

    st_head = st_ptr + row * st_rs + head * st_hs
    chunk = tl.arange(0, NCH)
    o_all = tl.zeros([NCH, BVC], tl.float32)  # the slice's o, one chunk per row (fused norm)
    for c in range(NCH):
        offs_v = vb * BV + c * BVC + tl.arange(0, BVC)
        mv = offs_v < D
        v = tl.load(src + 2 * inner + offs_v, mask=mv, other=0.0).to(tl.float32)
        st = st_head + offs_v[:, None] * st_vs + offs_k[None, :]
        m2 = mv[:, None] & mk[None, :]
        s = tl.load(st, mask=m2, other=0.0).to(tl.float32)
        s = s * decay[None, :]
        m = tl.sum(s * k[None, :], axis=1)
        delta = (v - m) * b
        s = s + delta[:, None] * k[None, :]
        o = tl.sum(s * q[None, :], axis=1)
        tl.store(st, _rounded(s, st_ptr.dtype.element_ty, RNE), mask=m2)
        if FUSE_NORM:
            o_all = tl.where(chunk[:, None] == c, o[None, :], o_all)
        else:
            tl.store(part_ptr + row * inner + head * D + offs_v, o, mask=mv)

    if FUSE_NORM:  # BV == BD here: o_all holds the head's whole output
        offs_o = chunk[:, None] * BVC + tl.arange(0, BVC)[None, :]
        mo = offs_o < D
        o_all = tl.where(mo, o_all, 0.0)
        r = 1.0 / tl.sqrt(tl.sum(tl.sum(o_all * o_all, axis=1), axis=0) / D + eps)
        gam = tl.load(gamma_ptr + head * gamma_hs + offs_o, mask=mo, other=0.0).to(tl.float32)
        gt = tl.load(gate_ptr + row * gate_rs + head * D + offs_o, mask=mo, other=0.0).to(tl.float32)
        out = o_all * r * gam / (1.0 + tl.exp(-gt))
        tl.store(o_ptr + row * o_rs + head * D + offs_o, _rounded(out, o_ptr.dtype.element_ty, RNE),
                 mask=mo)


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
    tl.store(o_ptr + row * o_rs + head * D + offs, _rounded(out, o_ptr.dtype.element_ty, RNE), mask=mv)


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
    split = tunables.get("kda.core.split_v")
    if rows > tunables.get("kda.core.split_rows_max") or split > BD:
        split = 1
    fuse = split == 1
    BV = BD // split
    BVC = min(BV, tunables.get("kda.core.dv_chunk"))
    part = o if fuse else _o_scratch(o.device, rows, inner)  # unused pointer when fused
    _core_kernel[(rows * heads, split)](
        qkv, qkv.stride(0), gate, gate.stride(0), beta, beta.stride(0), g, g.stride(0),
        dt_bias, a_log, gamma, gamma_hs,
        state, state.stride(0), state.stride(1), state.stride(2), o, o.stride(0), part,
        heads, D, float(sh.dims.eps), float(D ** -0.5),
        BD=BD, BV=BV, BVC=BVC, FUSE_NORM=fuse, RNE=INTERPRET,
        num_warps=tunables.get("kda.core.num_warps" if fuse else "kda.core.split_num_warps"))
    if not fuse:
        _norm_gate_kernel[(rows * heads,)](
            part, gate, gate.stride(0), gamma, gamma_hs, o, o.stride(0), heads, D,
            float(sh.dims.eps), BD=BD, RNE=INTERPRET, num_warps=tunables.get("kda.core.norm_num_warps"))
