"""Residual-mix kernel knobs (see kernels/k31/tunables.py for the format; keep the dict a literal)."""

TUNABLES = {
    # residual.mix: one program per row holds the whole hidden row in registers; the warps
    # spread next_pow2(H) lanes (8192 at full size: 16 f32 registers per vector at 16 warps).
    "residual.mix.num_warps": (16, (4, 8, 16, 32)),
}
