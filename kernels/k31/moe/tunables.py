"""MoE kernel knobs (see kernels/k31/tunables.py for the format; keep the dict a literal)."""

TUNABLES = {
    # moe.router: one program per row over every expert (padded to a power of two).
    "moe.router.num_warps": (4, (1, 2, 4, 8)),
    # moe.experts: pairs are grouped per local expert into blocks of block_m rows (padding
    # rows are computed on zeros and never stored to y); block_m is the MMA's N (16 is the
    # smallest). FC1 programs cover fc1_block_n intermediate columns, one weight tile of their
    # gate rows and up rows (2 * fc1_block_n rows); FC2 programs cover fc2_block_n latent
    # columns. A weight tile has 16 rows per warp (the MMA's operand layout, see experts.py),
    # so block_n sets the warps. k_tiles: 128-value K tiles loaded per loop step (64 contiguous
    # bytes of a weight row each; fewer where the step would not divide K); num_stages: triton's
    # software pipeliner (cp.async through shared memory) over those steps.
    "moe.experts.block_m": (16, (16, 32, 64)),
    "moe.experts.fc1_block_n": (32, (32, 64)),
    "moe.experts.fc1_k_tiles": (2, (1, 2, 4)),
    "moe.experts.fc1_num_stages": (3, (1, 2, 3, 4)),
    "moe.experts.fc2_block_n": (64, (64, 128)),
    "moe.experts.fc2_k_tiles": (2, (1, 2, 4)),
    "moe.experts.fc2_num_stages": (3, (1, 2, 3, 4)),
    # grouping: programs own group_block_e local experts and scan the pairs group_block_p at a
    # time; each also maps group_block_b blocks to their expert. Its ~28 programs (448 local
    # experts / 16) are latency-bound on the serial pair scan, so fewer, wider chunks win
    # (H200, 128 rows: count + place 0.055 -> 0.028 ms); the chunk never changes an output bit.
    "moe.experts.group_block_e": (16, (8, 16, 32, 64)),
    "moe.experts.group_block_p": (512, (64, 128, 256, 512, 1024)),
    "moe.experts.group_block_b": (64, (32, 64, 128, 256)),
    # moe.combine: one program per (row, block_d latent columns).
    "moe.combine.block_d": (512, (256, 512, 1024, 2048)),
    "moe.combine.num_warps": (4, (1, 2, 4, 8)),
    # moe.latent_norm: one program per row, the whole row in registers.
    "moe.latent_norm.num_warps": (8, (2, 4, 8, 16)),
    # moe.situ: one program per (row, block intermediate columns).
    "moe.situ.block": (1024, (256, 512, 1024, 2048, 4096)),
    "moe.situ.num_warps": (4, (1, 2, 4, 8)),
}
