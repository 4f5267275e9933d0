"""The DSA chain's references (mla.index_logits, mla.topk, mla.sparse_decode) take rows a chunk
at a time; here they are held to the ops' per-row statement (one request at a time, its live
tokens only), written out below as the spec reads.

Row counts cross the chunk (``ROW_CHUNK``); block tables hold garbage past a row's pages;
sparse decode's ``idx`` has -1 anywhere, repeats, and rows with no token. topk: equal indices.
Logits and decode: the per-row and chunked forms differ only in f32 summation order (a
batched product against one per row), so relative RMS <= 1e-6 and the -inf pattern equal.
"""
from __future__ import annotations

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gates.side.numerics import compare
from kernels.k31.config import Dims, Layout, Shapes
from kernels.k31.formats import fp8_rows, fp8_rows_decode
from kernels.k31.mla import reference as ref

FRESH = int(os.environ["KERN_TEST_SEED"])
ROWS = (1, ref.ROW_CHUNK - 1, ref.ROW_CHUNK + 3, 2 * ref.ROW_CHUNK + 5)
REL_RMS = 1e-6


# ---------------------------------------------------------------- the per-row statement
def pages_of(block_table, row: int, tokens, page: int):
    tokens = tokens.long()
    return block_table[row].long()[tokens // page], tokens % page


def index_logits_per_row(sh, q_idx, w_idx, idx_cache, idx_scale, block_table, ctx_len):
    d = sh.dims
    rows, cap = q_idx.shape[0], block_table.shape[1] * d.page_size
    out = torch.full((rows, cap), float("-inf"))
    c = (d.idx_dim * d.idx_heads) ** -0.5
    for r in range(rows):
        n = int(ctx_len[r])
        if n:
            pg, off = pages_of(block_table, r, torch.arange(n), d.page_size)
            k = fp8_rows_decode(idx_cache[pg, off], idx_scale[pg, off])
            s = torch.relu(q_idx[r].float() @ k.t())
            out[r, :n] = c * (w_idx[r].float().unsqueeze(-1) * s).sum(0)
    return out


def topk_per_row(k: int, logits, ctx_len):
    rows = logits.shape[0]
    out = torch.full((rows, k), -1, dtype=torch.int32)
    for r in range(rows):
        n = int(ctx_len[r])
        if n <= k:
            out[r, :n] = torch.arange(n, dtype=torch.int32)
            continue
        order = torch.sort(-logits[r, :n].double(), stable=True).indices[:k]
        out[r] = torch.sort(order).values.to(torch.int32)
    return out


def sparse_decode_per_row(sh, q_full, kv_cache, kv_scale, block_table, idx):
    d = sh.dims
    rows, heads, _ = q_full.shape
    o = torch.zeros(rows, heads, d.kv_lora)
    lse = torch.full((rows, heads), float("-inf"))
    for r in range(rows):
        t = idx[r][idx[r] >= 0]
        if t.numel():
            pg, off = pages_of(block_table, r, t, d.page_size)
            kv = fp8_rows_decode(kv_cache[pg, off], kv_scale[pg, off])
            s = (q_full[r].float() @ kv.t()) * d.q_head_dim ** -0.5
            lse[r] = torch.logsumexp(s, dim=-1)
            o[r] = torch.softmax(s, dim=-1) @ kv[:, :d.kv_lora]
    return o, lse


# ---------------------------------------------------------------- inputs
def paged(g, sh, rows: int, max_pages: int, ctx: list[int], width: int):
    """An fp8 cache of ``rows * max_pages + 2`` pages, a shuffled block table whose entries past
    each row's pages are out of range (never to be read)."""
    d = sh.dims
    n_pages = rows * max_pages + 2
    cache, scale = fp8_rows(torch.randn(n_pages, d.page_size, width, generator=g))
    table = torch.randperm(n_pages, generator=g)[:rows * max_pages].reshape(rows, max_pages)
    table = table.to(torch.int32)
    for r, n in enumerate(ctx):
        table[r, -(-n // d.page_size):] = 1 << 30
    return cache, scale, table


def contexts(g, rows: int, cap: int, k: int) -> list[int]:
    edge = [0, 1, k, k + 1, cap]
    return (edge + torch.randint(0, cap + 1, (rows,), generator=g).tolist())[:rows]


def same_values(got, want, what: str):
    assert torch.equal(torch.isneginf(got), torch.isneginf(want)), f"{what}: -inf pattern"
    live = ~torch.isneginf(want)
    diff = compare(want[live], got[live])
    assert diff.rel_rms <= REL_RMS and diff.nan == 0, f"{what}: {diff}"


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("rows", ROWS)
def test_index_logits_is_the_per_row_statement(rows):
    sh = Shapes(Dims.small(idx_heads=6, idx_dim=40, page_size=24), Layout.unsharded())
    g = torch.Generator().manual_seed(FRESH + rows)
    max_pages = 5
    ctx = contexts(g, rows, max_pages * sh.dims.page_size, sh.dims.idx_topk)
    cache, scale, table = paged(g, sh, rows, max_pages, ctx, sh.dims.idx_dim)
    q = torch.randn(rows, sh.dims.idx_heads, sh.dims.idx_dim, generator=g).to(torch.bfloat16)
    w = torch.randn(rows, sh.dims.idx_heads, generator=g).to(torch.bfloat16)
    ctx_len = torch.tensor(ctx, dtype=torch.int32)
    got = ref.mla_index_logits(sh, q_idx=q, w_idx=w, idx_cache=cache, idx_scale=scale,
                               block_table=table, ctx_len=ctx_len)["logits"]
    same_values(got, index_logits_per_row(sh, q, w, cache, scale, table, ctx_len),
                f"index_logits rows={rows}")


@settings(max_examples=60, deadline=None)
@given(rows=st.sampled_from(ROWS), k=st.integers(1, 40), cap=st.integers(1, 90),
       kind=st.sampled_from(("random", "ties", "specials")), seed=st.integers(0, 2**31 - 1))
def test_topk_is_the_per_row_statement(rows, k, cap, kind, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cap, generator=g)
    if kind == "ties":
        x = x.round()
    elif kind == "specials":  # -inf, NaN, +-0 inside the context
        pick = torch.rand(rows, cap, generator=g)
        x = torch.where(pick < 0.2, float("-inf"), x)
        x = torch.where((pick >= 0.2) & (pick < 0.3), float("nan"), x)
        x = torch.where((pick >= 0.3) & (pick < 0.4), -0.0, x)
    ctx = torch.randint(0, cap + 1, (rows,), generator=g)
    for r in range(rows):
        x[r, int(ctx[r]):] = float("inf")  # garbage past the context
    sh = Shapes(Dims.small(idx_topk=k), Layout.unsharded())
    got = ref.mla_topk(sh, logits=x, ctx_len=ctx.to(torch.int32))["idx"]
    assert torch.equal(got, topk_per_row(k, x, ctx)), (rows, k, cap, kind, seed)


@pytest.mark.parametrize("rows", ROWS)
def test_sparse_decode_is_the_per_row_statement(rows):
    sh = Shapes(Dims.small(kv_lora=80, rope_dim=16, nope_dim=24, idx_topk=24), Layout.unsharded())
    d = sh.dims
    g = torch.Generator().manual_seed(FRESH + 7 * rows)
    max_pages = 4
    ctx = contexts(g, rows, max_pages * d.page_size, d.idx_topk)
    cache, scale, table = paged(g, sh, rows, max_pages, ctx, d.cache_row)
    q = torch.randn(rows, sh.mla_heads, d.cache_row, generator=g).to(torch.bfloat16)
    idx = torch.full((rows, d.idx_topk), -1, dtype=torch.int32)
    for r, n in enumerate(ctx):
        if n:  # chosen tokens anywhere among the slots, some twice, -1 between them
            live = torch.rand(d.idx_topk, generator=g) < 0.7
            idx[r] = torch.where(live, torch.randint(0, n, (d.idx_topk,), generator=g), -1)
    got = ref.mla_sparse_decode(sh, q_full=q, kv_cache=cache, kv_scale=scale, block_table=table,
                                idx=idx)
    o, lse = sparse_decode_per_row(sh, q, cache, scale, table, idx)
    same_values(got["lse"], lse, f"lse rows={rows}")
    none = ~(idx >= 0).any(-1)
    assert none.any() and torch.equal(got["o_lat"][none], torch.zeros_like(got["o_lat"][none]))
    same_values(got["o_lat"], o, f"o_lat rows={rows}")
