"""lm_head.argmax against the protected reference.

Tolerances:
* realistic data (normed activations ~N(0,1), weights giving logits of std ~logit_std): logits
  and top_val are f32 from exact bf16 products with f32 accumulation, only the summation order
  differs from the reference: relative RMS <= 1e-5 (measured ~1e-7). top_idx must be exact; the
  generator redraws a row until its two best logits differ by more than 1e-3 relative, so
  rounding cannot legitimately flip the argmax.
* tie data (small integers, every sum exact in f32, duplicated weight rows): every output is
  bit exact, including the lowest-id tie break across and within vocab tiles.
"""
from __future__ import annotations

import os

import pytest
import torch

from gates.side.numerics import bitwise_equal, poison
from kernels.k31 import contracts
from kernels.k31.config import Dims, Layout, Shapes
from kernels.k31.lm_head import head as head_module
from tests.kernels.support import AWKWARD_ROWS, run_and_compare, to_device

REL_RMS = 1e-5
TIES_EXACT = ("logits", "top_val", "top_idx")
FRESH = int(os.environ["KERN_TEST_SEED"])
SEEDS = (0, FRESH)


def _realistic(sh: Shapes, rows: int, seed: int, strided: bool = False) -> dict:
    d = sh.dims
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(sh.vocab, d.hidden, generator=g) * d.logit_std * d.hidden ** -0.5).to(torch.bfloat16)
    wide = torch.empty(rows, d.hidden + (32 if strided else 0), dtype=torch.bfloat16)
    x = wide[:, -d.hidden:]
    for r in range(rows):
        while True:  # keep the argmax unambiguous under f32 rounding
            xr = torch.randn(d.hidden, generator=g).to(torch.bfloat16)
            top2 = (xr.float() @ w.float().t()).topk(2).values
            if top2[0] - top2[1] > 1e-3 * top2[0].abs():
                break
        x[r] = xr
    return _outputs(x, w)


def _ties(sh: Shapes, rows: int, seed: int) -> dict:
    """Small integers, so every logit is exact; copies of the winning weight rows at higher ids
    (same tile and other tiles) must lose to the lowest id."""
    d = sh.dims
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(-2, 3, (sh.vocab, d.hidden), generator=g).float()
    x = torch.randint(-2, 3, (rows, d.hidden), generator=g).float()
    best = (x @ w.t()).argmax(-1)
    for r in range(rows):
        src = int(best[r])
        for dst in (src + 1, src + 3, sh.vocab - 1, (src + sh.vocab // 2) % sh.vocab):
            if src < dst < sh.vocab:
                w[dst] = w[src]
    if rows > 1:  # a row whose every logit ties: the answer is the first id
        x[rows - 1] = 0
    return _outputs(x.to(torch.bfloat16), w.to(torch.bfloat16))


def _outputs(x, w) -> dict:
    rows, vocab = x.shape[0], w.shape[0]
    return dict(x=x, w=w, logits=torch.empty(rows, vocab, dtype=torch.float32),
                top_val=torch.empty(rows, dtype=torch.float32),
                top_idx=torch.empty(rows, dtype=torch.int64))


def _check(sh: Shapes, args: dict, seed: int, device, **tol):
    """``run_and_compare`` (on contiguous clones) plus, for a strided ``x``, a direct run on
    the view that must give the same bits."""
    args = to_device(device, args)
    try:
        diffs = run_and_compare("lm_head.argmax", sh, args, **tol)
        if not args["x"].is_contiguous():
            spec = contracts.op("lm_head.argmax")
            outs = [{k: poison(args[k].clone()) for k in spec.outputs} for _ in range(2)]
            spec.load_kernel()(sh, x=args["x"].contiguous(), w=args["w"], **outs[0])
            spec.load_kernel()(sh, x=args["x"], w=args["w"], **outs[1])
            for name in spec.outputs:
                assert bitwise_equal(outs[0][name], outs[1][name]), f"{name} differs for a strided x"
        return diffs
    except AssertionError as e:
        raise AssertionError(f"{e} (seed={seed})") from None


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rows", AWKWARD_ROWS)
@pytest.mark.parametrize("layout,rank", (("unsharded", 0), ("tp2", 0), ("tp2", 1)))
def test_realistic(layout, rank, rows, seed, device):
    sh = Shapes(Dims.small(), Layout.named(layout, rank=rank))
    args = _realistic(sh, rows, seed, strided=rows == 3)
    _check(sh, args, seed, device, rel_rms=REL_RMS, exact=("top_idx",))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rows", AWKWARD_ROWS)
@pytest.mark.parametrize("layout,rank", (("unsharded", 0), ("tp2", 1)))
def test_ties(layout, rank, rows, seed, device):
    sh = Shapes(Dims.small(), Layout.named(layout, rank=rank))
    _check(sh, _ties(sh, rows, seed), seed, device, rel_rms=0.0, exact=TIES_EXACT)


@pytest.mark.parametrize("rows", (1, 70))
def test_odd_sizes(rows, device):
    """vocab 1000 and hidden 96: partial vocab tiles and a partial K step; 70 rows: two row
    tiles with the last one partial."""
    seed = FRESH
    sh = Shapes(Dims.small(vocab=1000, hidden=96), Layout.unsharded())
    _check(sh, _realistic(sh, rows, seed), seed, device, rel_rms=REL_RMS, exact=("top_idx",))
    _check(sh, _ties(sh, rows, seed), seed, device, rel_rms=0.0, exact=TIES_EXACT)


def test_full_hidden_one_row(device):
    """The full model's hidden size (7168) over a 1000-id slice of the vocabulary."""
    seed = FRESH
    sh = Shapes(Dims.full(vocab=1000), Layout.unsharded())
    _check(sh, _realistic(sh, 1, seed), seed, device, rel_rms=REL_RMS, exact=("top_idx",))


@pytest.mark.usefixtures("gpu_launch")
@pytest.mark.parametrize("block_m_max,block_n,block_k", ((16, 32, 32), (128, 256, 64)))
def test_tunable_choices(monkeypatch, block_m_max, block_n, block_k, device):
    seed = FRESH
    chosen = {"lm_head.argmax.block_m_max": block_m_max, "lm_head.argmax.block_n": block_n,
              "lm_head.argmax.block_k": block_k, "lm_head.argmax.num_warps": 4,
              "lm_head.argmax.num_stages": 2}
    monkeypatch.setattr(head_module, "get", lambda name: chosen[name])
    sh = Shapes(Dims.small(vocab=1000, hidden=96), Layout.unsharded())
    _check(sh, _ties(sh, 17, seed), seed, device, rel_rms=0.0, exact=TIES_EXACT)


@pytest.mark.usefixtures("gpu_launch")
def test_gpu_launch(device):
    """The tunables' tiles (several vocab tiles, one row per reduce program) under the interpreter too."""
    seed = FRESH
    sh = Shapes(Dims.small(vocab=1000, hidden=96), Layout.named("tp2", rank=1))
    _check(sh, _realistic(sh, 17, seed, strided=True), seed, device, rel_rms=REL_RMS, exact=("top_idx",))
    _check(sh, _ties(sh, 17, seed), seed, device, rel_rms=0.0, exact=TIES_EXACT)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", (17, 256))
def test_full_vocab_share(rows, device):
    """A full rank's vocabulary share (20480 ids x 7168) at the benchmark's batch sizes."""
    seed = FRESH
    sh = Shapes(Dims.full(), Layout.published(2))
    _check(sh, _realistic(sh, rows, seed), seed, device, rel_rms=REL_RMS, exact=("top_idx",))
