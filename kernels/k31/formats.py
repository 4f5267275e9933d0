"""Storage formats: MXFP4 expert weights and fp8 rows with a per-row scale. Protected.

MXFP4 (OCP microscaling): values are e2m1 (sign, 2 exponent bits, 1 mantissa bit; magnitudes
0, 0.5, 1, 1.5, 2, 3, 4, 6), packed two per byte along the input (K) dimension — element ``2j``
in the low nibble, ``2j+1`` in the high nibble — with one e8m0 scale byte per 32 consecutive
values along K: ``value = e2m1 * 2**(scale - 127)``.

fp8 rows: ``float8_e4m3fn`` values with one f32 scale per row, ``row = fp8 * scale``; the scale is
``amax(row) / 448`` so the largest element lands on the format's largest finite value.
"""
from __future__ import annotations

import torch

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
FP8_MAX = 448.0
FP8 = torch.float8_e4m3fn
# Smallest scale allowed, so an all-zero row quantizes to zeros instead of NaN.
FP8_MIN_SCALE = 1e-12


def e2m1_table(device=None) -> torch.Tensor:
    """The 16 e2m1 codes as f32 (index = the 4-bit code, bit 3 = sign)."""
    mags = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)
    return torch.cat([mags, -mags])


def mxfp4_decode(packed: torch.Tensor, scales: torch.Tensor, group: int = 32) -> torch.Tensor:
    """``packed [..., K/2] uint8`` and ``scales [..., K/group] uint8`` -> ``[..., K] f32``."""
    lo = (packed & 0xF).long()
    hi = (packed >> 4).long()
    codes = torch.stack([lo, hi], dim=-1).flatten(-2)
    vals = e2m1_table(packed.device)[codes]
    exp = scales.to(torch.float32) - 127.0
    mult = torch.exp2(exp).repeat_interleave(group, dim=-1)
    return vals * mult


def mxfp4_encode(w: torch.Tensor, group: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``w [..., K]`` (K a multiple of ``group``) to MXFP4, round to nearest.

    The shared exponent follows the OCP rule ``floor(log2(amax)) - 2`` (2 = e2m1's largest
    exponent), so the group's largest magnitude lands in [4, 8) and saturates at 6.
    """
    shape = w.shape
    k = shape[-1]
    g = w.float().reshape(*shape[:-1], k // group, group)
    amax = g.abs().amax(dim=-1, keepdim=True).clamp_min(2.0 ** -120)
    exp = torch.floor(torch.log2(amax)) - 2.0
    scaled = g / torch.exp2(exp)
    mags = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=w.device)
    # Nearest magnitude; on a tie the lower code (midpoints are rare for random data).
    dist = (scaled.abs().unsqueeze(-1) - mags).abs()
    code = dist.argmin(dim=-1)
    code = torch.where((scaled < 0) & (code > 0), code + 8, code).to(torch.uint8)
    code = code.reshape(*shape[:-1], k)
    packed = code[..., 0::2] | (code[..., 1::2] << 4)
    scales = (exp.squeeze(-1) + 127.0).clamp(0, 254).to(torch.uint8)
    return packed.contiguous(), scales.contiguous()


def fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize each row of ``x [..., D]`` to fp8 e4m3 with an f32 per-row scale."""
    xf = x.float()
    scale = (xf.abs().amax(dim=-1) / FP8_MAX).clamp_min(FP8_MIN_SCALE)
    q = (xf / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q, scale


def fp8_rows_decode(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale.unsqueeze(-1)
