"""Tunables of the lm_head family (read through ``kernels.k31.tunables.get``)."""

TUNABLES = {
    # Row tile = min(block_m_max, max(16, next_pow2(rows))); vocab tile block_n; K step block_k.
    # block_n 64 gives 320 vocab tiles at full size (20480 per rank): every SM busy at 16 rows.
    "lm_head.argmax.block_m_max": (64, (16, 32, 64, 128, 256)),
    "lm_head.argmax.block_n": (64, (32, 64, 128, 256)),
    "lm_head.argmax.block_k": (128, (32, 64, 128, 256)),
    "lm_head.argmax.num_warps": (4, (2, 4, 8)),
    "lm_head.argmax.num_stages": (3, (2, 3, 4, 5)),
}
