"""The protected fp32 torch reference of the MLA ops (mla.prep, mla.absorb, mla.index_logits,
mla.topk, mla.sparse_decode, mla.vup_gate), beside the kernels.

``kernels/k31/reference.py`` states the contract every reference keeps and holds the
primitives families share; ``contracts.py`` names each op's reference. Protected: the
gates judge kernels against it, so no candidate edits it and no kernel imports it (the
scope gate refuses both).
"""
from __future__ import annotations

import torch

from ..config import Shapes
from ..formats import fp8_rows, fp8_rows_decode
from ..reference import BF16, F32, cache_slot, rms_norm


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Half-rotation (neox) RoPE over the last dim of ``x [rows, ..., d]`` at ``pos [rows]``."""
    d = x.shape[-1]
    half = d // 2
    inv_freq = theta ** (-(torch.arange(half, device=x.device, dtype=F32) * 2.0) / d)
    ang = pos.to(F32).reshape(-1, *([1] * (x.dim() - 2)), 1) * inv_freq
    cos, sin = torch.cos(ang), torch.sin(ang)
    x = x.float()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def mla_prep(sh: Shapes, *, q_a, kv_a, idx_k, w_qa, w_kv, w_idxk, pos, block_table,
             kv_cache, kv_scale, idx_cache, idx_scale):
    """Norms, RoPE on the key's rope part, fp8 append to the latent and indexer-key caches.

    Only rows whose new token belongs to this rank (``pos % cp == cp_rank``) append.
    """
    dims = sh.dims
    q_n = rms_norm(q_a, w_qa, dims.eps).to(BF16)
    c = rms_norm(kv_a[:, :dims.kv_lora], w_kv, dims.eps)
    kr = rope(kv_a[:, dims.kv_lora:], pos, dims.rope_theta)
    row = torch.cat([c, kr], dim=-1)
    kq, ks = fp8_rows(row)
    ik = rms_norm(idx_k, w_idxk, dims.eps)
    iq, is_ = fp8_rows(ik)
    owned, page, off = cache_slot(sh, pos, block_table)
    kv_cache, kv_scale = kv_cache.clone(), kv_scale.clone()
    idx_cache, idx_scale = idx_cache.clone(), idx_scale.clone()
    sel = owned.nonzero().flatten()
    kv_cache[page[sel], off[sel]] = kq[sel]
    kv_scale[page[sel], off[sel]] = ks[sel]
    idx_cache[page[sel], off[sel]] = iq[sel]
    idx_scale[page[sel], off[sel]] = is_[sel]
    return {"q_n": q_n, "kv_cache": kv_cache, "kv_scale": kv_scale,
            "idx_cache": idx_cache, "idx_scale": idx_scale}


def mla_absorb(sh: Shapes, *, qb, w_uk, pos):
    """``q_full[h] = (q_nope[h] @ W_UK[h]) || rope(q_rope[h])``; ``qb [rows, heads, 192]``."""
    dims = sh.dims
    q_nope = qb[..., :dims.nope_dim].float()
    q_rope = qb[..., dims.nope_dim:].float()
    lat = torch.einsum("rhn,hnc->rhc", q_nope, w_uk.float())
    qr = rope(q_rope, pos, dims.rope_theta)
    return {"q_full": torch.cat([lat, qr], dim=-1).to(BF16)}


# rows the DSA chain's references take at once: one chunk's gathered rows ([chunk, capacity or
# top-k, width] f32) bound their memory, and the launches and host syncs per row are gone (the
# accuracy gate's band and the scorer's timed band run them on every call of a pass)
ROW_CHUNK = 32


def _row_chunks(rows: int):
    for r0 in range(0, rows, ROW_CHUNK):
        yield slice(r0, min(rows, r0 + ROW_CHUNK))


def _pages(block_table: torch.Tensor, rows: slice, tokens: torch.Tensor, live: torch.Tensor, page: int):
    """Physical (page, offset) of local tokens ``tokens [chunk, n]`` of requests ``rows``; a
    token not ``live`` reads page 0 (a block table's unused entries are never read)."""
    tokens = torch.where(live, tokens.long(), 0)
    pg = torch.gather(block_table[rows].long(), 1, tokens // page)
    return torch.where(live, pg, 0), tokens % page


def mla_index_logits(sh: Shapes, *, q_idx, w_idx, idx_cache, idx_scale, block_table, ctx_len):
    """DSA indexer: ``logit[t] = c * sum_h w[h] relu(scale_t * q[h] . k[t])`` over the rank's
    context, ``c = (idx_dim * idx_heads) ** -0.5``; ``-inf`` past ``ctx_len``."""
    dims = sh.dims
    rows = q_idx.shape[0]
    cap = block_table.shape[1] * dims.page_size
    out = torch.full((rows, cap), float("-inf"), dtype=F32, device=q_idx.device)
    c = (dims.idx_dim * dims.idx_heads) ** -0.5
    t = torch.arange(cap, device=q_idx.device)
    for rs in _row_chunks(rows):
        live = t < ctx_len[rs].long().unsqueeze(-1)  # [chunk, cap]
        pg, off = _pages(block_table, rs, t.expand_as(live), live, dims.page_size)
        k = fp8_rows_decode(idx_cache[pg, off], idx_scale[pg, off])  # [chunk, cap, D]
        s = torch.relu(torch.einsum("rhd,rtd->rht", q_idx[rs].float(), k))  # [chunk, heads, cap]
        logit = c * (w_idx[rs].float().unsqueeze(-1) * s).sum(1)
        out[rs] = torch.where(live, logit, float("-inf"))
    return {"logits": out}


def mla_topk(sh: Shapes, *, logits, ctx_len):
    """Indices of the ``idx_topk`` largest logits among the first ``ctx_len`` tokens.

    Ties: the lower token index wins. Order: ascending token index. When ``ctx_len <= K``
    every token is chosen. Unused slots hold -1.
    """
    k = sh.dims.idx_topk
    rows, cap = logits.shape
    n = ctx_len.long().unsqueeze(-1)  # [rows, 1]
    slot = torch.arange(k, device=logits.device)
    # sort by (value desc, index asc): a stable sort on -value keeps index order on ties; a
    # second stable sort moves the tokens past ctx_len behind every token before it (NaN too)
    order = torch.sort(-logits.double(), dim=-1, stable=True).indices
    past = (order >= n).to(torch.int8)
    order = torch.gather(order, 1, torch.sort(past, dim=-1, stable=True).indices)[:, :k]
    top = torch.sort(order, dim=-1).values
    if top.shape[1] < k:  # fewer tokens than slots: ctx_len <= K, answered below
        top = torch.cat([top, top.new_zeros(rows, k - top.shape[1])], dim=1)
    # ctx_len <= K: every token, then -1
    top = torch.where(n <= k, torch.where(slot < n, slot, -1), top)
    return {"idx": top.to(torch.int32)}


def mla_sparse_decode(sh: Shapes, *, q_full, kv_cache, kv_scale, block_table, idx):
    """Attention of each local head over the chosen cache rows of this rank.

    Scores ``q_full[h] . row_j * q_head_dim**-0.5`` (``row_j`` = latent || rope key, fp8 x scale);
    returns ``o_lat[h] = sum softmax_j * latent_j`` and ``lse[h] = logsumexp_j score_j`` (natural
    log) so that context-parallel partials can merge exactly. No chosen row: o = 0, lse = -inf.
    Chosen rows are the entries of ``idx`` that are >= 0, wherever they are.
    """
    dims = sh.dims
    rows, heads, _ = q_full.shape
    o = torch.zeros(rows, heads, dims.kv_lora, dtype=F32, device=q_full.device)
    lse = torch.full((rows, heads), float("-inf"), dtype=F32, device=q_full.device)
    scale = dims.q_head_dim ** -0.5
    for rs in _row_chunks(rows):
        live = idx[rs] >= 0  # [chunk, K]
        pg, off = _pages(block_table, rs, idx[rs], live, dims.page_size)
        kv = fp8_rows_decode(kv_cache[pg, off], kv_scale[pg, off])  # [chunk, K, 576]
        kv = torch.where(live.unsqueeze(-1), kv, 0.0)  # an unchosen slot adds nothing, NaN neither
        s = torch.einsum("rhd,rkd->rhk", q_full[rs].float(), kv) * scale
        s = s.masked_fill(~live.unsqueeze(1), float("-inf"))
        lse[rs] = torch.logsumexp(s, dim=-1)
        chosen = live.any(-1)[:, None, None]
        p = torch.where(chosen, torch.softmax(s, dim=-1), 0.0)  # none chosen: softmax is NaN
        o[rs] = torch.einsum("rhk,rkc->rhc", p, kv[..., :dims.kv_lora])
    return {"o_lat": o, "lse": lse}


def mla_vup_gate(sh: Shapes, *, o_lat, w_uv, gate):
    """``o[h] = (o_lat[h] @ W_UV[h]) * sigmoid(gate[h])`` -> ``[rows, heads * v_dim]``."""
    rows = o_lat.shape[0]
    o = torch.einsum("rhc,hcv->rhv", o_lat.float(), w_uv.float()).reshape(rows, -1)
    return {"o": (o * torch.sigmoid(gate.float())).to(BF16)}
