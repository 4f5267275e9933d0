"""Per-sequence decode state of one rank, filled with seeded data that looks real. Protected.

* KDA: per KDA layer, ``state [rows, heads_r, D(v), D(k)]`` in ``Dims.kda_state_dtype`` and the
  conv window ``[rows, taps-1, 3*I_r]`` bf16 (the last three tokens' q|k|v pre-conv inputs).
* MLA: per MLA layer, the latent cache ``[pages, page_size, 576]`` fp8 e4m3 with a per-token
  f32 scale ``[pages, page_size]``, and the indexer keys ``[pages, page_size, idx_dim]`` fp8
  with their scale; paged through ``block_table [rows, pages_per_row]`` (one table for all
  layers). Pages are handed out in a seeded shuffled order, as a real allocator would leave
  them, so a kernel that assumes contiguous pages fails.
* Context parallel: this rank holds token ``t`` of a request iff ``t % cp == cp_rank``, at local
  index ``t // cp``. The capacity covers every token up to ``max_position``.

Values are drawn by global index (layer, request, token, channel), never zeros, so any layout
holds the same data for the same tokens. Unwritten future slots are filled too.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import formats
from .config import Shapes
from .platform import cdiv
from .synthetic import UNIFORM, draw

STATE_DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}


@dataclass
class DecodeState:
    rows: int
    capacity: int  # local tokens per request this rank can hold
    block_table: torch.Tensor  # [rows, pages_per_row] int32
    kda_state: dict  # layer -> [rows, heads_r, D, D]
    conv_window: dict  # layer -> [rows, taps-1, 3*I_r] bf16
    kv_cache: dict  # layer -> [pages, page, cache_row] fp8
    kv_scale: dict  # layer -> [pages, page] f32
    idx_cache: dict  # layer -> [pages, page, idx_dim] fp8
    idx_scale: dict  # layer -> [pages, page] f32

    def tensors(self):
        """Every state tensor with a stable name (for hashing, snapshots and restore)."""
        yield "block_table", self.block_table
        for name in ("kda_state", "conv_window", "kv_cache", "kv_scale", "idx_cache", "idx_scale"):
            for layer, t in sorted(getattr(self, name).items()):
                yield f"{name}.{layer}", t

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for _, t in self.tensors())

    def snapshot(self) -> dict:
        return {k: t.clone() for k, t in self.tensors()}

    def restore(self, snap: dict) -> None:
        for k, t in self.tensors():
            t.copy_(snap[k])


def _fp8_fill(cache: torch.Tensor, scale: torch.Tensor, name: tuple, sh: Shapes, rows: int,
              capacity: int, block_table: torch.Tensor, width: int) -> None:
    """Fill the pages of every request with fp8 rows drawn for their global token ids."""
    page = sh.dims.page_size
    cp, r = sh.layout.cp, sh.layout.cp_rank
    pages_per_row = block_table.shape[1]
    local = torch.arange(pages_per_row * page, device=cache.device, dtype=torch.int64)
    global_tok = local * cp + r
    for row in range(rows):
        vals = draw((*name, row), global_tok * width, width, kind=UNIFORM)
        q, s = formats.fp8_rows(vals)
        pg = block_table[row].long()
        cache[pg] = q.reshape(pages_per_row, page, width)
        scale[pg] = s.reshape(pages_per_row, page)


def build_state(sh: Shapes, *, rows: int, max_position: int, seed: int, device,
                progress=None) -> DecodeState:
    d = sh.dims
    capacity = max(1, sh.context_on_rank(max_position + 1))
    pages_per_row = cdiv(capacity, d.page_size)
    n_pages = rows * pages_per_row
    # a seeded shuffled page allocation: draw keys and argsort them
    keys = draw((seed, "pages", sh.layout.cp_rank), [0], n_pages, kind=UNIFORM, device=device)[0]
    block_table = torch.argsort(keys).to(torch.int32).reshape(rows, pages_per_row)
    st = DecodeState(rows=rows, capacity=pages_per_row * d.page_size, block_table=block_table,
                     kda_state={}, conv_window={}, kv_cache={}, kv_scale={}, idx_cache={},
                     idx_scale={})
    sdt = STATE_DTYPES[d.kda_state_dtype]
    for layer in d.kda_layers:
        st.kda_state[layer] = torch.empty(rows, sh.kda_heads, d.kda_head_dim, d.kda_head_dim,
                                          dtype=sdt, device=device)
        st.conv_window[layer] = torch.empty(rows, d.conv_taps - 1, 3 * sh.kda_inner,
                                            dtype=torch.bfloat16, device=device)
    refill_recurrent(st, sh, rows, seed)
    done, total = 0, len(d.mla_layers)
    for layer in d.mla_layers:
        kv = torch.empty(n_pages, d.page_size, d.cache_row, dtype=formats.FP8, device=device)
        kvs = torch.empty(n_pages, d.page_size, dtype=torch.float32, device=device)
        _fp8_fill(kv, kvs, (seed, "kv", layer), sh, rows, capacity, block_table, d.cache_row)
        ik = torch.empty(n_pages, d.page_size, d.idx_dim, dtype=formats.FP8, device=device)
        iks = torch.empty(n_pages, d.page_size, dtype=torch.float32, device=device)
        _fp8_fill(ik, iks, (seed, "idx", layer), sh, rows, capacity, block_table, d.idx_dim)
        st.kv_cache[layer], st.kv_scale[layer] = kv, kvs
        st.idx_cache[layer], st.idx_scale[layer] = ik, iks
        done += 1
        if progress:
            progress("state", done, total)
    return st


def refill_recurrent(st: DecodeState, sh: Shapes, rows: int, seed: int) -> None:
    """Rewrite the KDA state and conv window of requests ``0 .. rows-1`` with their initial
    seeded values (the scorer's output check restarts a batch from here without keeping a
    copy of tens of GB)."""
    d = sh.dims
    device = st.block_table.device
    h0 = sh.layout.rank * sh.kda_heads
    D, I = d.kda_head_dim, sh.kda_inner
    chans = torch.tensor([p * d.kda_heads * D + h0 * D + c for p in range(3) for c in range(I)],
                         dtype=torch.int64, device=device)
    gl = 3 * d.kda_heads * D
    for layer in d.kda_layers:
        # state of global head h of request row: a contiguous [D*D] block per (row, head)
        starts = ((torch.arange(rows, device=device) * d.kda_heads).unsqueeze(1)
                  + h0 + torch.arange(sh.kda_heads, device=device)).reshape(-1) * (D * D)
        st.kda_state[layer][:rows] = (draw((seed, "kda_state", layer), starts, D * D, std=0.05)
                                      .reshape(rows, sh.kda_heads, D, D))
        starts = ((torch.arange(rows * (d.conv_taps - 1), device=device) * gl).unsqueeze(1)
                  + chans.unsqueeze(0)).reshape(-1)
        st.conv_window[layer][:rows] = draw((seed, "conv", layer), starts, 1).reshape(
            rows, d.conv_taps - 1, 3 * I)
