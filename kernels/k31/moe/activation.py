"""SiTU in f32 from core ``tl`` ops, shared by moe.situ (the shared experts and the dense MLP)
and the routed experts' FC1 epilogue (moe.experts), so both compute the same activation.

This file belongs to no single op: a change here makes the gates treat every op as touched.
"""
import triton
import triton.language as tl


@triton.jit
def tanh_f32(z):
    """tanh in f32 from core ops only (no tl.tanh in triton 3.6's core language).

    Small |z| uses the odd Taylor series to z^7 (next term < 2e-9 relative at |z| < 1/8), where
    ``(1 - e^-2|z|) / (1 + e^-2|z|)`` would lose digits to cancellation; large |z| uses that
    form, which saturates to +-1 without overflow (e^-2|z| -> 0)."""
    a = tl.abs(z)
    t = tl.exp(-2.0 * a)
    big = (1.0 - t) / (1.0 + t)
    z2 = z * z
    small = z * (1.0 + z2 * (-1.0 / 3.0 + z2 * (2.0 / 15.0 + z2 * (-17.0 / 315.0))))
    return tl.where(a < 0.125, small, tl.where(z < 0, -big, big))


@triton.jit
def situ_f32(g, u):
    """SiTU of f32 gate and up values (``situ`` of ``moe/reference.py``)."""
    sig = 1.0 / (1.0 + tl.exp(-g))
    return 4.0 * tanh_f32(g * 0.25) * sig * (25.0 * tanh_f32(u * 0.04))
