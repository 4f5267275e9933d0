"""The protected fp32 torch reference of the KDA ops (kda.conv, kda.core), beside the kernels.

``kernels/k31/reference.py`` states the contract every reference keeps and holds the
primitives families share; ``contracts.py`` names each op's reference. Protected: the
gates judge kernels against it, so no candidate edits it and no kernel imports it (the
scope gate refuses both).
"""
from __future__ import annotations

import torch

from ..config import Shapes
from ..reference import BF16, rms_norm


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps)


def kda_conv(sh: Shapes, *, x, w, window):
    """Causal depthwise conv over (3 cached tokens, current token), SiLU; window shifts by one."""
    taps = w.shape[1]
    seq = torch.cat([window.float(), x.float().unsqueeze(1)], dim=1)  # [rows, taps, C]
    y = (seq * w.float().t().unsqueeze(0)).sum(1)
    y = torch.nn.functional.silu(y).to(BF16)
    new_window = torch.cat([window[:, 1:], x.unsqueeze(1).to(window.dtype)], dim=1) if taps > 1 else window
    return {"y": y, "window": new_window}


def kda_core(sh: Shapes, *, qkv, gate, beta, g, dt_bias, a_log, gamma, state):
    """One decode step of Kimi Delta Attention for every (row, local head).

    ``qkv [rows, 3*I]`` is the conv output (q | k | v, each ``[heads, D]``), ``gate [rows, I]``
    the output-gate pre-activation, ``beta [rows, heads]`` pre-sigmoid, ``g [rows, I]`` the
    decay projection ``f_b(f_a)`` before ``dt_bias``. ``state [rows, heads, D(v), D(k)]``.
    """
    rows = qkv.shape[0]
    h, d = sh.kda_heads, sh.dims.kda_head_dim
    inner = h * d
    q = qkv[:, :inner].float().reshape(rows, h, d)
    k = qkv[:, inner:2 * inner].float().reshape(rows, h, d)
    v = qkv[:, 2 * inner:3 * inner].float().reshape(rows, h, d)
    q = l2_normalize(q) * (d ** -0.5)
    k = l2_normalize(k)
    b = torch.sigmoid(beta[:, :h].float())  # [rows, h]
    gg = (g.float() + dt_bias.float()).reshape(rows, h, d)
    decay = torch.exp(-5.0 * torch.sigmoid(torch.exp(a_log.float()).reshape(1, h, 1) * gg))
    s = state.float() * decay.unsqueeze(2)  # scale dk columns
    m = torch.einsum("rhvk,rhk->rhv", s, k)
    delta = (v - m) * b.unsqueeze(-1)
    s = s + delta.unsqueeze(-1) * k.unsqueeze(2)
    o = torch.einsum("rhvk,rhk->rhv", s, q)
    o = rms_norm(o, gamma, sh.dims.eps).reshape(rows, inner)
    o = o * torch.sigmoid(gate.float())
    return {"o": o.to(BF16), "state": s.to(state.dtype)}
