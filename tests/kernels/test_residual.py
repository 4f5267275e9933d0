"""residual.mix against the protected reference (the Triton interpreter on a CPU, the kernel on a
GPU).

Tolerances. ``partial`` (f32) and ``snaps`` (bf16) are the same adds in the same order and the
same rounding as the reference, so they must match exactly (every snapshot slot, written or
not). ``x`` (bf16) is within rel RMS <= 1e-3, and at most 1% of its elements differ at all
(a systematic rounding or precision slip differs almost everywhere): the kernel's online softmax and reductions
differ from the reference only in f32 summation order (measured at H = 7168 over 30 seeds: rel
RMS <= 5e-5, at most 5 of 14336 elements apart). No ulp bound: an element of ``h`` (a mix of
candidates of both signs) that cancels to ~0 is a few ulps off while right to f32 precision.
A single wrong element of size ~1 already gives rel RMS ~1e-2; a truncating bf16 cast 4e-3.
"""
from __future__ import annotations

import os

import pytest
import torch

from kernels.k31 import contracts
from kernels.k31.config import Dims, Layout, Shapes
from tests.kernels.support import AWKWARD_ROWS, run_and_compare, to_device

BF16, F32 = torch.bfloat16, torch.float32
FRESH_SEED = int(os.environ["KERN_TEST_SEED"])
SEEDS = (0, FRESH_SEED)
TOL = dict(rel_rms=1e-3, exact=("partial", "snaps"))


def mix_args(sh: Shapes, rows: int, seed: int, *, n_snap: int, use_partial: bool,
             close_block: bool, delta: bool, delta2: bool, fresh_partial: bool = False):
    """Snapshots are cumulative like a residual stream (each adds ~N(0, 0.8^2) to the last);
    slots at and past ``n_snap`` hold large junk that a correct kernel never reads. The partial
    is a block's running sum (~N(0, 2^2)) or zero at a block's first call; deltas ~N(0, 1);
    ``sw`` ~ N(0, (2/sqrt(H))^2) so that scores spread by ~2 and the softmax is not one-hot."""
    gen = torch.Generator().manual_seed(seed)
    H, S = sh.dims.hidden, sh.dims.max_snapshots
    snaps = torch.randn(S, rows, H, generator=gen) * 50.0
    acc = torch.randn(rows, H, generator=gen)
    for i in range(n_snap):
        snaps[i] = acc
        acc = acc + 0.8 * torch.randn(rows, H, generator=gen)
    partial = (torch.zeros(rows, H) if fresh_partial
               else 2.0 * torch.randn(rows, H, generator=gen)).to(F32)
    return {
        "snaps": snaps.to(BF16),
        "partial": partial,
        "delta": torch.randn(rows, H, generator=gen).to(BF16) if delta else None,
        "delta2": torch.randn(rows, H, generator=gen).to(BF16) if delta2 else None,
        "sw": (torch.randn(H, generator=gen) * 2.0 / H ** 0.5).to(BF16),
        "norm_w": (1.0 + 0.1 * torch.randn(H, generator=gen)).to(BF16),
        "x": torch.empty(rows, H, dtype=BF16),
        "n_snap": n_snap, "use_partial": use_partial, "close_block": close_block,
    }


def compare_mix(sh, args):
    diffs = run_and_compare("residual.mix", sh, args, **TOL)
    d = diffs["x"]
    assert d.differing <= max(2, d.numel // 100), f"x: too many elements differ: {d}"
    return diffs


def check(sh, rows, seed, device, **case):
    try:
        return compare_mix(sh, to_device(device, mix_args(sh, rows, seed, **case)))
    except AssertionError as e:
        raise AssertionError(f"seed={seed} rows={rows} case={case}: {e}") from e


# every static combination the step uses, on the small model (H = 128, 3 snapshot slots)
CASES = {
    "first_call": dict(n_snap=1, use_partial=False, close_block=False, delta=False, delta2=False,
                       fresh_partial=True),
    "first_call_dirty_partial": dict(n_snap=1, use_partial=False, close_block=False, delta=False,
                                     delta2=False),
    "mid_block": dict(n_snap=2, use_partial=True, close_block=False, delta=True, delta2=False),
    "mid_block_no_partial": dict(n_snap=2, use_partial=False, close_block=False, delta=True,
                                 delta2=False),
    "close_block": dict(n_snap=1, use_partial=True, close_block=True, delta=True, delta2=False),
    "close_last_slot": dict(n_snap=2, use_partial=False, close_block=True, delta=True, delta2=True),
    "delta2": dict(n_snap=2, use_partial=True, close_block=False, delta=True, delta2=True),
    "delta2_only": dict(n_snap=1, use_partial=True, close_block=False, delta=False, delta2=True),
    "all_slots": dict(n_snap=3, use_partial=True, close_block=False, delta=True, delta2=False),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rows", AWKWARD_ROWS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_mix(case, rows, seed, device):
    check(Shapes(Dims.small(), Layout.unsharded()), rows, seed, device, **CASES[case])


@pytest.mark.usefixtures("gpu_launch")
@pytest.mark.parametrize("case", ("first_call", "close_block", "delta2", "all_slots"))
def test_mix_gpu_launch(case, device):
    """The GPU's launch shape (one row per program) through the interpreter too."""
    check(Shapes(Dims.small(), Layout.unsharded()), 17, FRESH_SEED, device, **CASES[case])


@pytest.mark.parametrize("case", ("mid_block", "close_block", "delta2"))
def test_mix_odd_hidden(case, device):
    # H = 96: masked lanes in the 128-wide vector
    check(Shapes(Dims.small(hidden=96), Layout.unsharded()), 5, 3, device, **CASES[case])


@pytest.mark.parametrize("case", (
    dict(n_snap=8, use_partial=True, close_block=False, delta=True, delta2=True),  # 9 candidates
    dict(n_snap=7, use_partial=True, close_block=True, delta=True, delta2=False),  # fill slot 7
    dict(n_snap=1, use_partial=False, close_block=False, delta=False, delta2=False),
), ids=("nine_candidates", "close_into_last", "first_call"))
def test_mix_full_dims(case, device):
    # H = 7168, 8 snapshot slots, as on the H200 (hidden is replicated: every layout alike)
    sh = Shapes(Dims.full(), Layout.published())
    check(sh, 2, FRESH_SEED, device, **case)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", (17, 256))
def test_mix_full_dims_many_rows(rows, device):
    """The benchmark's batch sizes at full width (too slow for the interpreter)."""
    sh = Shapes(Dims.full(), Layout.published())
    check(sh, rows, FRESH_SEED, device, n_snap=8, use_partial=True, close_block=False, delta=True,
          delta2=True)


def test_mix_spread_scores_stay_finite(device):
    """Scores spread by ~40 (a near one-hot softmax): the online max keeps exp() finite."""
    sh = Shapes(Dims.small(), Layout.unsharded())
    args = to_device(device, mix_args(sh, 3, 9, **CASES["all_slots"]))
    args["sw"] = (args["sw"].float() * 20.0).to(BF16)
    compare_mix(sh, args)


def test_roofline_counts_what_moves():
    from kernels.k31.residual.roofline import mix
    sh = Shapes(Dims.small(), Layout.unsharded())
    rows, H = 3, sh.dims.hidden
    args = mix_args(sh, rows, 1, **CASES["close_block"])
    cost = mix(sh, args)
    # partial r+w (f32), delta, snapshot 0 read, snapshot 1 written, sw, norm_w, x
    want = rows * H * (8 + 2 + 2 + 2 + 2) + 2 * H * 2
    assert cost.bytes == want, (cost, want)
    assert contracts.op("residual.mix").roofline == "kernels.k31.residual.roofline:mix"
