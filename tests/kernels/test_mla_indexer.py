"""mla.index_logits and mla.topk against the protected reference.

Tolerances:
* index_logits: f32 logits from exact bf16 x (fp8 -> bf16) products with f32 accumulation;
  only the summation order and where the per-token scale is applied differ from the reference,
  so relative RMS <= 1e-5 (measured ~1e-7); the -inf padding must match exactly (``compare``
  reports any inf mismatch as rel RMS = inf).
* topk: indices, bit exact (including ties, -1 padding and ascending order).
"""
from __future__ import annotations

import os

import pytest
import torch

from gates.side.numerics import bitwise_equal, poison
from kernels.k31 import contracts
from kernels.k31.config import Dims, Layout, Shapes
from kernels.k31.formats import fp8_rows
from kernels.k31.mla import topk as topk_module
from tests.kernels.support import AWKWARD_ROWS, run_and_compare, to_device

LOGITS_REL_RMS = 1e-5
FRESH = int(os.environ["KERN_TEST_SEED"])
SEEDS = (0, FRESH)


# ------------------------------------------------------------------------------ inputs
def _indexer_args(sh: Shapes, rows: int, max_pages: int, ctx: list[int], seed: int,
                  strided: bool = False) -> dict:
    """Realistic indexer inputs: RMS-normed keys quantized to fp8 rows, N(0,1) bf16 queries and
    head weights, pages scattered at random (unused block-table entries hold garbage page ids
    that must never be read)."""
    d = sh.dims
    g = torch.Generator().manual_seed(seed)
    n_pages = rows * max_pages + 3
    keys = torch.randn(n_pages, d.page_size, d.idx_dim, generator=g)
    keys = keys * torch.rsqrt(keys.pow(2).mean(-1, keepdim=True) + d.eps)
    idx_cache, idx_scale = fp8_rows(keys)
    block_table = torch.randperm(n_pages, generator=g)[:rows * max_pages]
    block_table = block_table.reshape(rows, max_pages).to(torch.int32)
    for r, n in enumerate(ctx):
        used = -(-n // d.page_size)
        block_table[r, used:] = 1 << 30  # garbage: out of range of the cache
    width = d.idx_heads * d.idx_dim
    if strided:  # views into fused projection outputs, as the step passes them
        qb = torch.randn(rows, 40 + width, generator=g).to(torch.bfloat16)
        q_idx = qb[:, 40:].unflatten(1, (d.idx_heads, d.idx_dim))
        wb = torch.randn(rows, 24 + d.idx_heads, generator=g).to(torch.bfloat16)
        w_idx = wb[:, 24:]
    else:
        q_idx = torch.randn(rows, d.idx_heads, d.idx_dim, generator=g).to(torch.bfloat16)
        w_idx = torch.randn(rows, d.idx_heads, generator=g).to(torch.bfloat16)
    cap = max_pages * d.page_size
    return dict(q_idx=q_idx, w_idx=w_idx, idx_cache=idx_cache, idx_scale=idx_scale,
                block_table=block_table, ctx_len=torch.tensor(ctx, dtype=torch.int32),
                logits=torch.empty(rows, cap, dtype=torch.float32))


def _ctx_lengths(rows: int, cap: int, page: int, g: torch.Generator) -> list[int]:
    """Edge lengths first (0, 1, a page +- 1, the capacity), then random ones."""
    edge = [cap, 1, 0, page + 1, page - 1, cap - 1]
    rand = torch.randint(0, cap + 1, (rows,), generator=g).tolist()
    return (edge + rand)[:rows] if rows > 1 else [cap - 3]


def _check(op: str, sh: Shapes, args: dict, seed: int, device, **tol):
    """``run_and_compare`` (which runs on contiguous clones), plus, when some input is a strided
    view, a direct run on the views that must give the same bits."""
    args = to_device(device, args)
    try:
        diffs = run_and_compare(op, sh, args, **tol)
        spec = contracts.op(op)
        views = [k for k in spec.inputs if not args[k].is_contiguous()]
        if views:
            dense = {k: (v.contiguous() if k in spec.inputs else poison(v.clone()))
                     for k, v in args.items()}
            strided = {k: (v if k in spec.inputs else poison(v.clone())) for k, v in args.items()}
            spec.load_kernel()(sh, **dense)
            spec.load_kernel()(sh, **strided)
            for name in spec.outputs:
                assert bitwise_equal(dense[name], strided[name]), \
                    f"{op}: {name} differs when {views} are strided views"
        return diffs
    except AssertionError as e:
        raise AssertionError(f"{e} (seed={seed})") from None


# ------------------------------------------------------------------------------ index_logits
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rows", AWKWARD_ROWS)
def test_index_logits_small(rows, seed, device):
    sh = Shapes(Dims.small(), Layout.unsharded())
    max_pages = 7
    g = torch.Generator().manual_seed(seed + 1)
    ctx = _ctx_lengths(rows, max_pages * sh.dims.page_size, sh.dims.page_size, g)
    args = _indexer_args(sh, rows, max_pages, ctx, seed, strided=rows == 3)
    _check("mla.index_logits", sh, args, seed, device, rel_rms=LOGITS_REL_RMS)


@pytest.mark.parametrize("rank", (0, 1))
def test_index_logits_tp2_odd_dims(rank, device):
    """Non-power-of-two heads, dim and page size (padded dot operands, page math)."""
    seed = FRESH
    sh = Shapes(Dims.small(idx_heads=6, idx_dim=80, page_size=24), Layout.named("tp2", rank=rank))
    args = _indexer_args(sh, 3, 9, [5, 9 * 24, 101], seed, strided=True)
    _check("mla.index_logits", sh, args, seed, device, rel_rms=LOGITS_REL_RMS)


def test_index_logits_full_dims_one_row(device):
    """64 index heads x 128 with 64-token pages, a context that ends inside a page."""
    seed = FRESH
    sh = Shapes(Dims.full(), Layout.published(0))
    args = _indexer_args(sh, 1, 12, [12 * 64 - 37], seed, strided=True)
    _check("mla.index_logits", sh, args, seed, device, rel_rms=LOGITS_REL_RMS)


# ------------------------------------------------------------------------------ topk
def _topk_logits(rows: int, cap: int, ctx: list[int], kind: str, g: torch.Generator, k: int):
    """Logits rows of several kinds; past ``ctx_len`` they hold garbage (+inf, huge values)
    that the kernel must not read as context."""
    x = torch.randn(rows, cap, generator=g) * 3.0
    if kind == "coarse":  # few distinct values: many ties at the threshold
        x = (x * 0.75).round() / 0.75
    elif kind == "constant":
        x = torch.full((rows, cap), 0.25)
    elif kind == "signs":  # +-0, -inf inside the context, both signs across many binades
        x = torch.sign(x) * torch.exp2((x * 6).round())
        pick = torch.rand(rows, cap, generator=g)
        x = torch.where(pick < 0.15, torch.zeros_like(x), x)
        x = torch.where((pick >= 0.15) & (pick < 0.3), torch.full_like(x, -0.0), x)
        x = torch.where((pick >= 0.3) & (pick < 0.33), torch.full_like(x, float("-inf")), x)
    elif kind == "split":  # exactly K positives, scattered: the first radix pass settles it
        x = -x.abs() - 1.0
        for r, n in enumerate(ctx):
            if n > k:
                x[r, torch.randperm(n, generator=g)[:k]] = 1.0 + torch.rand(k, generator=g)
    elif kind == "neg_inf":  # the K-th largest is -inf: ties among -inf, lowest index first
        pick = torch.rand(rows, cap, generator=g)
        x = torch.where(pick < 0.8, torch.full_like(x, float("-inf")), x)
    for r, n in enumerate(ctx):
        x[r, n:] = float("inf") if r % 2 else 1e30
    return x


@pytest.mark.parametrize("kind", ("random", "coarse", "constant", "signs", "split", "neg_inf"))
@pytest.mark.parametrize("seed", SEEDS)
def test_topk_small(kind, seed, device):
    sh = Shapes(Dims.small(), Layout.unsharded())
    k = sh.dims.idx_topk
    g = torch.Generator().manual_seed(seed)
    for rows in AWKWARD_ROWS:
        cap = 7 * sh.dims.page_size
        ctx = ([cap, 0, k, k + 1, k - 1, 1, cap - 5] + torch.randint(0, cap + 1, (rows,), generator=g).tolist())
        ctx = ctx[:rows] if rows > 1 else [cap - 2]
        logits = _topk_logits(rows, cap, ctx, kind, g, k)
        args = dict(logits=logits, ctx_len=torch.tensor(ctx, dtype=torch.int32),
                    idx=torch.empty(rows, k, dtype=torch.int32))
        _check("mla.topk", sh, args, seed, device, rel_rms=0.0, exact=("idx",))


@pytest.mark.parametrize("kind", ("random", "coarse"))
def test_topk_full_k(kind, device):
    """K = 2048 over a few thousand tokens (non-multiple of the block), tp2 rank 1."""
    seed = FRESH
    sh = Shapes(Dims.small(idx_topk=2048), Layout.named("tp2", rank=1))
    g = torch.Generator().manual_seed(seed)
    cap = 5000
    ctx = [4999, 2048, 3333]
    logits = _topk_logits(3, cap, ctx, kind, g, 2048)
    args = dict(logits=logits, ctx_len=torch.tensor(ctx, dtype=torch.int32),
                idx=torch.empty(3, 2048, dtype=torch.int32))
    _check("mla.topk", sh, args, seed, device, rel_rms=0.0, exact=("idx",))


@pytest.mark.usefixtures("gpu_launch")
@pytest.mark.parametrize("radix_bits", (1, 2, 4))
@pytest.mark.parametrize("block", (512, 2048))
def test_topk_tunable_choices(monkeypatch, radix_bits, block, device):
    """Every radix width and a small/large block give the same exact answer (K not a power of
    two, K larger than the block, a strided logits view)."""
    seed = FRESH
    chosen = {"mla.topk.radix_bits": radix_bits, "mla.topk.block": block, "mla.topk.num_warps": 4}
    monkeypatch.setattr(topk_module, "get", lambda name: chosen[name])
    sh = Shapes(Dims.small(idx_topk=300), Layout.unsharded())
    g = torch.Generator().manual_seed(seed)
    cap = 1200
    ctx = [1200, 299, 301, 777]
    wide = _topk_logits(4, cap + 8, ctx, "coarse", g, 300)
    args = dict(logits=wide[:, :cap], ctx_len=torch.tensor(ctx, dtype=torch.int32),
                idx=torch.empty(4, 300, dtype=torch.int32))
    _check("mla.topk", sh, args, seed, device, rel_rms=0.0, exact=("idx",))


# ------------------------------------------------------------------------------ GPU launch shapes
@pytest.mark.usefixtures("gpu_launch")
def test_gpu_launch(device):
    """The tunables' launch shapes (chunks of TILES x BLOCK_T tokens, 512-token blocks with 4-bit
    digits, one row per program) through the interpreter too."""
    seed = FRESH
    sh = Shapes(Dims.small(), Layout.named("tp2", rank=1))
    max_pages = 40  # 640 tokens: two index chunks, two topk blocks
    g = torch.Generator().manual_seed(seed)
    cap = max_pages * sh.dims.page_size
    ctx = _ctx_lengths(17, cap, sh.dims.page_size, g)
    _check("mla.index_logits", sh, _indexer_args(sh, 17, max_pages, ctx, seed, strided=True), seed,
           device, rel_rms=LOGITS_REL_RMS)
    k = sh.dims.idx_topk
    args = dict(logits=_topk_logits(17, cap, ctx, "coarse", g, k), ctx_len=torch.tensor(ctx, dtype=torch.int32),
                idx=torch.empty(17, k, dtype=torch.int32))
    _check("mla.topk", sh, args, seed, device, rel_rms=0.0, exact=("idx",))


@pytest.mark.gpu
@pytest.mark.parametrize("rows", (17, 256))
def test_full_dims_many_rows(rows, device):
    """Full per-rank shapes (64 x 128 index heads, K = 2048) over a 3k-token share at the
    benchmark's batch sizes (too slow for the interpreter)."""
    seed = FRESH
    sh = Shapes(Dims.full(), Layout.published(0))
    max_pages = 48
    g = torch.Generator().manual_seed(seed)
    cap = max_pages * sh.dims.page_size
    ctx = _ctx_lengths(rows, cap, sh.dims.page_size, g)
    _check("mla.index_logits", sh, _indexer_args(sh, rows, max_pages, ctx, seed, strided=True), seed,
           device, rel_rms=LOGITS_REL_RMS)
    k = sh.dims.idx_topk
    args = dict(logits=_topk_logits(rows, cap, ctx, "random", g, k),
                ctx_len=torch.tensor(ctx, dtype=torch.int32), idx=torch.empty(rows, k, dtype=torch.int32))
    _check("mla.topk", sh, args, seed, device, rel_rms=0.0, exact=("idx",))
