"""Tunables of the MLA family (read through ``kernels.k31.tunables.get``)."""

TUNABLES = {
    # ---- mla.prep / mla.absorb / mla.sparse_decode / mla.vup_gate (owner: decode-kernel helper;
    # the indexer helper owns the mla.index_logits / mla.topk entries; keep both) ----
    # prep: one program per (row, task); task 0 = q norm, 1 = kv latent row, 2 = indexer key.
    "mla.prep.num_warps": (4, (1, 2, 4, 8)),
    # absorb: tile of rows x latent columns per program; K (nope_dim) is done in one dot.
    # block_m 32 x block_n 128 and 64 x 128 spill at 4 warps on sm_90 (ptxas of triton 3.9)
    "mla.absorb.block_m": (16, (16, 32, 64)),
    "mla.absorb.block_n": (128, (64, 128, 256)),
    "mla.absorb.num_warps": (4, (2, 4, 8)),
    # sparse_decode: gathered cache rows per inner step; programs the K split aims for
    # (rows x splits >= target); the split chunk is a power-of-two multiple of block_n.
    "mla.sparse_decode.block_n": (32, (16, 32, 64)),
    "mla.sparse_decode.target_programs": (256, (128, 256, 512, 1024, 2048)),
    # 1: p is split into bf16 high + residual for the p.latent dot (~2^-16 relative); 0: one
    # bf16 p as FlashMLA does (~1.6e-3 relative RMS on o_lat; the accuracy gate decides).
    "mla.sparse_decode.p_split": (1, (0, 1)),
    # 8 warps: at 4 warps block_n 32 spills on sm_90 (255 regs + stack; ptxas of triton 3.9)
    "mla.sparse_decode.num_warps": (8, (4, 8)),
    "mla.sparse_decode.num_stages": (2, (1, 2, 3)),
    "mla.sparse_decode.merge_block_c": (128, (64, 128, 256, 512)),
    # vup_gate: tile of rows x v columns per program, K (kv_lora) stepped by block_k.
    "mla.vup_gate.block_m": (16, (16, 32, 64)),
    "mla.vup_gate.block_n": (64, (32, 64, 128)),
    "mla.vup_gate.block_k": (128, (64, 128, 256)),
    "mla.vup_gate.num_warps": (4, (2, 4, 8)),
    # ---- end of decode-kernel section ----
    # mla.index_logits: tokens per key tile (the dot's N), tiles per program (queries loaded
    # once per program), launch shape.
    "mla.index_logits.block_t": (128, (32, 64, 128, 256)),
    "mla.index_logits.tiles": (4, (1, 2, 4, 8, 16)),
    "mla.index_logits.num_warps": (4, (2, 4, 8)),
    "mla.index_logits.num_stages": (3, (1, 2, 3, 4)),
    # mla.topk: one program per row holds the row's first power-of-two tokens in registers
    # (topk.RESIDENT_PER_THREAD keys a thread at most) and streams any remainder in blocks of
    # `block` elements (the published shapes: 16384 resident + at most one 64-token page).
    # 16 warps: 32 keys a thread at 16384 tokens, 126 registers, no spills (sm90 AOT compile,
    # triton 3.6); each search step is one compare a key over 4 schedulers plus one block sum.
    "mla.topk.block": (256, (256, 512, 1024, 2048)),
    "mla.topk.num_warps": (16, (4, 8, 16, 32)),
}
