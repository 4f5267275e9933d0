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


def gather_cache_rows(block_table: torch.Tensor, row: int, tokens: torch.Tensor, page: int):
    """Physical (page, offset) of local tokens ``tokens`` of request ``row``."""
    tokens = tokens.long()
    # row selected first: torch.compile keeps a plain select's int symbolic, where an int inside
    # an advanced index is specialized (one compile per row in the compile baseline)
    return block_table[row].long()[tokens // page], tokens % page


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


def mla_index_logits(sh: Shapes, *, q_idx, w_idx, idx_cache, idx_scale, block_table, ctx_len):
    """DSA indexer: ``logit[t] = c * sum_h w[h] relu(scale_t * q[h] . k[t])`` over the rank's
    context, ``c = (idx_dim * idx_heads) ** -0.5``; ``-inf`` past ``ctx_len``."""
    dims = sh.dims
    rows = q_idx.shape[0]
    cap = block_table.shape[1] * dims.page_size
    out = torch.full((rows, cap), float("-inf"), dtype=F32, device=q_idx.device)
    c = (dims.idx_dim * dims.idx_heads) ** -0.5
    for r in range(rows):
        n = int(ctx_len[r])
        if n == 0:
            continue
        t = torch.arange(n, device=q_idx.device)
        pg, off = gather_cache_rows(block_table, r, t, dims.page_size)
        k = fp8_rows_decode(idx_cache[pg, off], idx_scale[pg, off])  # [n, D]
        s = torch.relu(q_idx[r].float() @ k.t())  # [heads, n]
        out[r, :n] = c * (w_idx[r].float().unsqueeze(-1) * s).sum(0)
    return {"logits": out}


def mla_topk(sh: Shapes, *, logits, ctx_len):
    """Indices of the ``idx_topk`` largest logits among the first ``ctx_len`` tokens.

    Ties: the lower token index wins. Order: ascending token index. When ``ctx_len <= K``
    every token is chosen. Unused slots hold -1.
    """
    k = sh.dims.idx_topk
    rows, cap = logits.shape
    out = torch.full((rows, k), -1, dtype=torch.int32, device=logits.device)
    for r in range(rows):
        n = int(ctx_len[r])
        if n <= k:
            out[r, :n] = torch.arange(n, dtype=torch.int32, device=logits.device)
            continue
        v = logits[r, :n].double()
        t = torch.arange(n, device=logits.device)
        # sort by (value desc, index asc): a stable sort on -value keeps index order on ties
        order = torch.sort(-v, stable=True).indices[:k]
        out[r] = torch.sort(t[order]).values.to(torch.int32)
    return {"idx": out}


def mla_sparse_decode(sh: Shapes, *, q_full, kv_cache, kv_scale, block_table, idx):
    """Attention of each local head over the chosen cache rows of this rank.

    Scores ``q_full[h] . row_j * q_head_dim**-0.5`` (``row_j`` = latent || rope key, fp8 x scale);
    returns ``o_lat[h] = sum softmax_j * latent_j`` and ``lse[h] = logsumexp_j score_j`` (natural
    log) so that context-parallel partials can merge exactly. No chosen row: o = 0, lse = -inf.
    """
    dims = sh.dims
    rows, heads, _ = q_full.shape
    o = torch.zeros(rows, heads, dims.kv_lora, dtype=F32, device=q_full.device)
    lse = torch.full((rows, heads), float("-inf"), dtype=F32, device=q_full.device)
    scale = dims.q_head_dim ** -0.5
    for r in range(rows):
        t = idx[r][idx[r] >= 0]
        if t.numel() == 0:
            continue
        pg, off = gather_cache_rows(block_table, r, t, dims.page_size)
        kv = fp8_rows_decode(kv_cache[pg, off], kv_scale[pg, off])  # [n, 576]
        s = (q_full[r].float() @ kv.t()) * scale  # [heads, n]
        lse[r] = torch.logsumexp(s, dim=-1)
        o[r] = torch.softmax(s, dim=-1) @ kv[:, :dims.kv_lora]
    return {"o_lat": o, "lse": lse}


def mla_vup_gate(sh: Shapes, *, o_lat, w_uv, gate):
    """``o[h] = (o_lat[h] @ W_UV[h]) * sigmoid(gate[h])`` -> ``[rows, heads * v_dim]``."""
    rows = o_lat.shape[0]
    o = torch.einsum("rhc,hcv->rhv", o_lat.float(), w_uv.float()).reshape(rows, -1)
    return {"o": (o * torch.sigmoid(gate.float())).to(BF16)}
