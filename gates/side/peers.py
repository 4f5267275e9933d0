"""Peer libraries' implementations of our ops, timed at the same shapes in the same process.

KDA decode: fla-core's ``fused_recurrent_kda`` (the recurrent update with q/k L2 norm, the
KDA gate and sigmoid beta fused; no output norm or gate, which our ``kda.core`` also does)
against the tree's ``kda.core``, one token, CUDA graph replays. fla-core must be importable
(carried as a wheel to the device); without it the comparison says so.
"""
from __future__ import annotations

import torch


def _graph_ms(fn, device, n: int = 50) -> float:
    from .timing import Timer

    t = Timer(fn, device)
    fn()
    t.capture()
    times = sorted(t.measure(n))
    return times[len(times) // 2]


def kda_decode(sh, rows_list: list[int], device, state_dtype: torch.dtype) -> dict:
    try:
        from fla.ops.kda import fused_recurrent_kda
    except ImportError as e:
        return {"error": f"fla-core is not importable here ({e}); carry its wheel"}
    from kernels.k31.dispatch import Ops

    kernel = Ops(sh, "kernel").implementation("kda.core")
    d = sh.dims
    H, D, I = sh.kda_heads, d.kda_head_dim, sh.kda_inner
    out = {}
    g = torch.Generator(device=device).manual_seed(0)
    for rows in rows_list:
        def rnd(*shape, dtype=torch.bfloat16):
            return torch.randn(*shape, generator=g, device=device).to(dtype)

        qkv, gate, beta, gg = rnd(rows, 3 * I), rnd(rows, I), rnd(rows, H), rnd(rows, I)
        dt_bias = torch.full((I,), -3.0, device=device)
        a_log = torch.zeros(H, device=device)
        gamma = torch.ones(D, dtype=torch.bfloat16, device=device)
        state = (rnd(rows, H, D, D, dtype=torch.float32) * 0.05).to(state_dtype)
        o = torch.empty(rows, I, dtype=torch.bfloat16, device=device)

        def ours():
            kernel(sh, qkv=qkv, gate=gate, beta=beta, g=gg, dt_bias=dt_bias, a_log=a_log,
                   gamma=gamma, state=state, o=o)

        q = qkv[:, :I].reshape(rows, 1, H, D)
        k = qkv[:, I:2 * I].reshape(rows, 1, H, D)
        v = qkv[:, 2 * I:].reshape(rows, 1, H, D)
        g4 = gg.reshape(rows, 1, H, D)
        b3 = beta.reshape(rows, 1, H)
        fstate = state.clone()  # [rows, H, V, K]: fla's state_v_first layout

        def peer():
            fused_recurrent_kda(q, k, v, g4, b3, A_log=a_log, dt_bias=dt_bias.reshape(H, D),
                                initial_state=fstate, output_final_state=False,
                                use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                use_beta_sigmoid_in_kernel=True, lower_bound=-5.0,
                                state_v_first=True, inplace_final_state=True)

        entry = {}
        for name, fn in (("ours", ours), ("fla", peer)):
            try:
                entry[name + "_us"] = _graph_ms(fn, device) * 1e3
            except Exception as e:  # noqa: BLE001 - a peer failing is a result, not a crash
                entry[name + "_error"] = f"{type(e).__name__}: {e}"[:300]
        state_bytes = rows * H * D * D * state.element_size() * 2
        entry["state_rw_bytes"] = state_bytes
        if "ours_us" in entry and "fla_us" in entry:
            entry["ratio_ours_over_fla"] = entry["ours_us"] / entry["fla_us"]
        out[rows] = entry
    return out
