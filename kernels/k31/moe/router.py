"""moe.router: ``s = sigmoid(logits)``; the top_k experts by ``key = s + bias`` (ties: the lower
expert id; order: best key first); ``w = s[chosen] / sum(s[chosen]) * routed_scale``.

Shapes: ``logits [rows, E]`` (any float dtype; row stride ``logits.stride(0)``), ``bias [E]``,
``ids [rows, top_k]`` int32 (global expert ids), ``w [rows, top_k]`` f32.

Design: one program per row (under the interpreter: per batch, see ``platform.FEW_PROGRAMS``)
holds all E keys (padded to a power of two with -inf, 1024 lanes at
E = 896) and runs top_k selection passes: the max key, then the lowest id holding it (an
explicit min over ids, so ties go low whatever argmax's tie rule), which is then knocked out
with -inf. Chosen ids and s values collect in top_k-wide registers and are stored once.
The key is formed in f32 as the reference forms it (sigmoid in f32, + bias in f32); tl.exp is
not torch's expf, so s can differ by an ulp or two, which reorders two experts only when their
keys lie within that distance (about 2 rows in 10^4 for N(0, 2) logits + N(0, 0.1) bias).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import platform, tunables
from ..platform import cdiv, next_pow2


@triton.jit
def _router_kernel(logits_ptr, logits_rs, bias_ptr, ids_ptr, ids_rs, w_ptr, w_rs,
                   rows, n_experts, routed_scale,
                   TOP_K: tl.constexpr, K_PAD: tl.constexpr, E_PAD: tl.constexpr,
                   BLOCK_R: tl.constexpr):
    """Program ``pid`` routes rows ``[pid * BLOCK_R, (pid + 1) * BLOCK_R)``: keys ``[BLOCK_R, E_PAD]``,
    one selection pass per slot reduces along the experts."""
    row = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    live = row < rows
    e = tl.arange(0, E_PAD)
    ok = e < n_experts
    m2 = live[:, None] & ok[None, :]
    lg = tl.load(logits_ptr + row[:, None] * logits_rs + e[None, :], mask=m2, other=0.0).to(tl.float32)
    # IEEE division (div_rn, not the GPU's 2-ulp default) so s strays from torch.sigmoid only by
    # exp's error: a key off by an ulp can swap two near-tied experts, and ids must match exactly.
    s = tl.math.div_rn(1.0, 1.0 + tl.exp(-lg))
    bias = tl.load(bias_ptr + e, mask=ok, other=0.0).to(tl.float32)
    key = tl.where(ok[None, :], s + bias[None, :], float("-inf"))
    slot = tl.arange(0, K_PAD)[None, :]
    chosen_id = tl.zeros([BLOCK_R, K_PAD], tl.int32)
    chosen_s = tl.zeros([BLOCK_R, K_PAD], tl.float32)
    for j in tl.static_range(TOP_K):
        best = tl.max(key, axis=1)
        pick = tl.min(tl.where(key == best[:, None], e[None, :], E_PAD), axis=1)
        hit = e[None, :] == pick[:, None]
        s_pick = tl.sum(tl.where(hit, s, 0.0), axis=1)
        chosen_id = tl.where(slot == j, pick[:, None], chosen_id)
        chosen_s = tl.where(slot == j, s_pick[:, None], chosen_s)
        key = tl.where(hit, float("-inf"), key)
    w = chosen_s / tl.sum(chosen_s, axis=1)[:, None] * routed_scale
    keep = live[:, None] & (slot < TOP_K)
    tl.store(ids_ptr + row[:, None] * ids_rs + slot, chosen_id, mask=keep)
    tl.store(w_ptr + row[:, None] * w_rs + slot, w, mask=keep)


def moe_router(sh, *, logits: torch.Tensor, bias: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> None:
    rows, n_experts = logits.shape
    top_k = sh.dims.top_k
    assert ids.shape == (rows, top_k) and w.shape == (rows, top_k) and bias.shape == (n_experts,)
    assert logits.stride(1) == 1 and bias.stride(0) == 1 and ids.stride(1) == 1 and w.stride(1) == 1
    if rows == 0:
        return
    # GPU: one row per program; interpreter: the whole batch in one program
    block_r = next_pow2(rows) if platform.FEW_PROGRAMS else 1
    _router_kernel[(cdiv(rows, block_r),)](
        logits, logits.stride(0), bias, ids, ids.stride(0), w, w.stride(0),
        rows, n_experts, float(sh.dims.routed_scale),
        TOP_K=top_k, K_PAD=next_pow2(top_k), E_PAD=next_pow2(n_experts), BLOCK_R=block_r,
        num_warps=tunables.get("moe.router.num_warps"))
