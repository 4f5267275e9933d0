"""KDA kernel knobs (see kernels/k31/tunables.py for the format; keep the dict a literal)."""

TUNABLES = {
    # kda.conv: a program covers block_c channels of rows_per_program rows (the taps are loaded
    # once per program and reused across its rows).
    "kda.conv.block_c": (512, (128, 256, 512, 1024, 2048)),
    "kda.conv.rows_per_program": (4, (1, 2, 4, 8, 16)),
    "kda.conv.num_warps": (4, (1, 2, 4, 8)),
    # kda.core: one program per (row, head, dv slice). split_v > 1 cuts each head's dv rows
    # into that many programs (more, smaller programs: fla's fused_recurrent takes 8-row
    # slices) and then needs a second small kernel for the per-head RMSNorm x gate; it applies
    # only when rows <= split_rows_max (256 = always at the benchmark's batch sizes).
    "kda.core.split_v": (1, (1, 2, 4, 8, 16)),
    "kda.core.split_rows_max": (32, (16, 32, 64, 128, 256)),
    # state rows a program updates per loop step (a chunk smaller than its slice trades one
    # register-resident tile for a loop: fewer registers, more programs per SM)
    "kda.core.dv_chunk": (128, (8, 16, 32, 64, 128)),
    # fused path (split_v == 1): 8 warps hold a 128 x 128 f32 tile in ~150 registers on sm_90
    # without spilling; 4 warps spill unless dv_chunk <= 64
    "kda.core.num_warps": (8, (4, 8, 16)),
    "kda.core.split_num_warps": (2, (1, 2, 4, 8)),
    "kda.core.norm_num_warps": (1, (1, 2, 4)),
}
