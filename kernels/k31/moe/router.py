"""moe.router: ``s = sigmoid(logits)``; the top_k experts by ``key = s + bias`` (ties: the lower
expert id; order: best key first); ``w = s[chosen] / sum(s[chosen]) * routed_scale``.

Shapes: ``logits [rows, E]`` (any float dtype; row stride ``logits.stride(0)``), ``bias [E]``,
``ids [rows, top_k]`` int32 (global expert ids), ``w [rows, top_k]`` f32.

Design: one program per row holds all E keys (padded to a power of two with -inf, 1024 lanes at
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

from .. import tunables
from ..platform import next_pow2


@triton.jit
def _router_kernel(logits_ptr, logits_rs, bias_ptr, ids_ptr, ids_rs, w_ptr, w_rs,
                   n_experts, routed_scale,
                   TOP_K: tl.constexpr, K_PAD: tl.constexpr, E_PAD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, E_PAD)
    ok = e < n_experts
    lg = tl.load(logits_ptr + row * logits_rs + e, mask=ok, other=0.0).to(tl.float32)
    # IEEE division (div_rn, not the GPU's 2-ulp default) so s strays from torch.sigmoid only by
    # exp's error: a key off by an ulp can swap two near-tied experts, and ids must match exactly.
    s = tl.math.div_rn(1.0, 1.0 + tl.exp(-lg))
    bias = tl.load(bias_ptr + e, mask=ok, other=0.0).to(tl.float32)
    key = tl.where(ok, s + bias, float("-inf"))
    slot = tl.arange(0, K_PAD)
    chosen_id = tl.zeros([K_PAD], tl.int32)
    chosen_s = tl.zeros([K_PAD], tl.float32)
    for j in tl.static_range(TOP_K):
        best = tl.max(key, axis=0)
        pick = tl.min(tl.where(key == best, e, E_PAD), axis=0)
        hit = e == pick
        s_pick = tl.sum(tl.where(hit, s, 0.0), axis=0)
        chosen_id = tl.where(slot == j, pick, chosen_id)
        chosen_s = tl.where(slot == j, s_pick, chosen_s)
        key = tl.where(hit, float("-inf"), key)
    w = chosen_s / tl.sum(chosen_s, axis=0) * routed_scale
    keep = slot < TOP_K
    tl.store(ids_ptr + row * ids_rs + slot, chosen_id, mask=keep)
    tl.store(w_ptr + row * w_rs + slot, w, mask=keep)


def moe_router(sh, *, logits: torch.Tensor, bias: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> None:
    rows, n_experts = logits.shape
    top_k = sh.dims.top_k
    assert ids.shape == (rows, top_k) and w.shape == (rows, top_k) and bias.shape == (n_experts,)
    assert logits.stride(1) == 1 and bias.stride(0) == 1 and ids.stride(1) == 1 and w.stride(1) == 1
    if rows == 0:
        return
    _router_kernel[(rows,)](
        logits, logits.stride(0), bias, ids, ids.stride(0), w, w.stride(0),
        n_experts, float(sh.dims.routed_scale),
        TOP_K=top_k, K_PAD=next_pow2(top_k), E_PAD=next_pow2(n_experts),
        num_warps=tunables.get("moe.router.num_warps"))
