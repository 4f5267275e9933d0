"""MLA + DSA cost formulas: the fewest bytes each op must move and the FLOPs it must do.

Two owners write this file: the prep/absorb/sparse_decode/vup_gate section and the
index_logits/topk section. Edit only your own section; never delete the other's functions.
Formulas that depend on data (owned rows, chosen indices) read the argument tensors; they run
on the host after the op, outside any CUDA graph.
"""
from __future__ import annotations

import torch

from ..roofline import Cost, nbytes


# ---- mla.prep / mla.absorb / mla.sparse_decode / mla.vup_gate (owner: decode kernels) ----
def _owned_rows(sh, pos: torch.Tensor) -> int:
    """Rows whose new token this rank stores (``pos % cp == cp_rank``)."""
    lo = sh.layout
    return int(((pos.long() % lo.cp) == lo.cp_rank).sum())


def prep(sh, args) -> Cost:
    """bytes = q_a + kv_a + idx_k + the three norm weights + pos (read once) + q_n (written)
    + per owned row: block-table entry (4) + latent row (cache_row fp8 + 4-byte scale)
    + indexer key (idx_dim fp8 + 4-byte scale) written. Cache slots are write-only.

    flops per row = 4*q_lora (square, sum, x*r, *w) + 4*kv_lora + 6*rope_dim (rotation)
    + 3*cache_row (abs-max, divide, convert) + 4*idx_dim + 3*idx_dim."""
    d = sh.dims
    rows = args["q_a"].shape[0]
    owned = _owned_rows(sh, args["pos"])
    moved = nbytes(args["q_a"], args["kv_a"], args["idx_k"], args["w_qa"], args["w_kv"],
                   args["w_idxk"], args["pos"], args["q_n"])
    moved += owned * (4 + d.cache_row * 1 + 4 + d.idx_dim * 1 + 4)
    per_row = 4 * d.q_lora + 4 * d.kv_lora + 6 * d.rope_dim + 3 * d.cache_row + 7 * d.idx_dim
    return Cost(moved, float(rows * per_row))


def absorb(sh, args) -> Cost:
    """bytes = qb + w_uk + pos (read) + q_full (written).
    flops = 2 * rows * heads * nope_dim * kv_lora (the per-head absorb GEMM)
    + 6 * rows * heads * rope_dim (rotation)."""
    d = sh.dims
    qb = args["qb"]
    rows, heads = qb.shape[0], qb.shape[1]
    moved = nbytes(qb, args["w_uk"], args["pos"], args["q_full"])
    flops = 2.0 * rows * heads * d.nope_dim * d.kv_lora + 6.0 * rows * heads * d.rope_dim
    return Cost(moved, flops)


def sparse_decode(sh, args) -> Cost:
    """bytes = q_full + idx (read) + o_lat + lse (written)
    + per valid index (idx >= 0): its cache row (cache_row fp8 bytes) and its 4-byte scale
    + per distinct (row, page) touched: one 4-byte block-table entry.
    flops = 2 * heads * valid * (cache_row + kv_lora) summed over rows (scores over the whole
    row, then probabilities times the latent part)."""
    d = sh.dims
    q, idx = args["q_full"], args["idx"]
    heads = q.shape[1]
    valid_mask = idx >= 0
    valid = int(valid_mask.sum())
    kv = args["kv_cache"]
    moved = nbytes(q, idx, args["o_lat"], args["lse"])
    moved += valid * (d.cache_row * kv.element_size() + args["kv_scale"].element_size())
    if valid:
        rows = torch.arange(idx.shape[0], device=idx.device).unsqueeze(1).expand_as(idx)
        pages = idx.long().clamp_min(0) // d.page_size
        key = (rows[valid_mask].long() * (args["block_table"].shape[1] + 1) + pages[valid_mask])
        moved += 4 * int(torch.unique(key).numel())
    flops = 2.0 * heads * valid * (d.cache_row + d.kv_lora)
    return Cost(moved, flops)


def vup_gate(sh, args) -> Cost:
    """bytes = o_lat + w_uv + gate (read) + o (written).
    flops = 2 * rows * heads * kv_lora * v_dim (the per-head up-projection)
    + 4 * rows * heads * v_dim (sigmoid and gate multiply)."""
    d = sh.dims
    o_lat = args["o_lat"]
    rows, heads = o_lat.shape[0], o_lat.shape[1]
    moved = nbytes(o_lat, args["w_uv"], args["gate"], args["o"])
    flops = 2.0 * rows * heads * d.kv_lora * d.v_dim + 4.0 * rows * heads * d.v_dim
    return Cost(moved, flops)
# ---- end of decode-kernel section ----


# ---- mla.index_logits / mla.topk (owner: indexer helper; define index_logits and topk below) ----
def _context_tokens(sh, args) -> tuple[int, int]:
    """(sum over rows of min(ctx_len, capacity), sum over rows of the pages those tokens use)."""
    page = sh.dims.page_size
    cap = args["block_table"].shape[1] * page if "block_table" in args else args["logits"].shape[1]
    n = args["ctx_len"].long().clamp(0, cap)
    return int(n.sum()), int(((n + page - 1) // page).sum())


def index_logits(sh, args) -> Cost:
    """bytes = q_idx + w_idx + ctx_len (read) + logits (written in full, -inf padding included)
    + per context token: its key (idx_dim fp8 bytes) and its 4-byte scale
    + per page the context uses: one block-table entry.
    flops = tokens * heads * (2 * idx_dim + 4): the q . k dot per head, then scale, relu,
    head weight and head sum; tokens = sum over rows of ctx_len."""
    tokens, pages = _context_tokens(sh, args)
    q, cache = args["q_idx"], args["idx_cache"]
    heads, dim = q.shape[1], q.shape[2]
    moved = nbytes(q, args["w_idx"], args["ctx_len"], args["logits"])
    moved += tokens * (dim * cache.element_size() + args["idx_scale"].element_size())
    moved += pages * args["block_table"].element_size()
    return Cost(moved, float(tokens * heads * (2 * dim + 4)))


def topk(sh, args) -> Cost:
    """bytes = ctx_len + idx (written in full) + per row the ctx_len logits it ranks (f32).
    flops = 0: the selection is integer counting and compaction, no floating-point math."""
    tokens, _ = _context_tokens(sh, args)
    moved = nbytes(args["ctx_len"], args["idx"]) + tokens * args["logits"].element_size()
    return Cost(moved, 0.0)

# ---- end of indexer section ----
