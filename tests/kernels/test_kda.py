"""kda.conv and kda.core against the protected reference (the Triton interpreter on a CPU, the
kernels on a GPU).

Tolerances. The kernels compute in f32 like the reference, so a bf16 result differs only where
a different f32 summation order flips a rounding (measured: rel RMS 0 .. 3e-7, a handful of
elements one ulp apart; an f32 state 6e-8). Bounds, with a wide margin to that and well under
what a wrong kernel shows (a truncating bf16 cast alone gives 4e-3):
* ``y`` (conv), ``o`` (core) and a bf16 state: rel RMS <= 1e-3 and at most 1% of the elements
  differ at all (a systematic rounding or precision slip differs almost everywhere); the conv
  window is a copy: exact; an f32 state: rel RMS <= 1e-5.
* No ulp bounds: an element that cancels to ~0 (a conv sum, an element of the mat-vec ``S q``)
  lands several ulps off in either direction while being right to f32 precision. One wrong
  element of size ~1 among a few thousand already gives rel RMS ~1e-2.
"""
from __future__ import annotations

import os

import pytest
import torch

from gates.side.numerics import bitwise_equal, compare, poison, unwritten
from kernels.k31 import contracts
from kernels.k31 import tunables as tunables_mod
from kernels.k31.config import Dims, Layout, Shapes
from tests.kernels.support import AWKWARD_ROWS, run_and_compare, to_device

BF16, F32 = torch.bfloat16, torch.float32
FRESH_SEED = int(os.environ["KERN_TEST_SEED"])
SEEDS = (0, FRESH_SEED)

LAYOUTS = (("unsharded", 0), ("tp2", 0), ("tp2", 1))


def _shapes(layout=("unsharded", 0), **dims) -> Shapes:
    return Shapes(Dims.small(**dims), Layout.named(layout[0], rank=layout[1]))


def _with_seed(seed, fn):
    try:
        return fn()
    except AssertionError as e:
        raise AssertionError(f"seed={seed}: {e}") from e


def run_on_views(op_name: str, sh: Shapes, args: dict, parents: tuple, *, rel_rms: float,
                 max_ulp: float | None = None, exact: tuple[str, ...] = (),
                 state_rel_rms: float | None = None):
    """Like ``run_and_compare`` but hands the kernel the strided views themselves (the support
    helper clones them, which makes them contiguous). ``parents`` are the buffers the input
    views slice; they must come back unchanged."""
    spec = contracts.op(op_name)
    expected = spec.reference(sh, **{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                     for k, v in args.items() if k not in spec.outputs})
    before = [p.clone() for p in parents]
    diffs = {}
    for name in spec.outputs:
        poison(args[name])
    spec.load_kernel()(sh, **args)
    for name in spec.outputs + spec.state:
        if name in spec.outputs:
            assert unwritten(args[name]) == 0, f"{op_name}: {name} not fully written"
        d = diffs[name] = compare(expected[name], args[name])
        if name in exact:
            assert d.differing == 0, f"{op_name}: {name} must match exactly: {d}"
        else:
            assert d.rel_rms <= rel_rms, f"{op_name}: {name} rel RMS {d.rel_rms:.3g}: {d}"
            assert max_ulp is None or d.max_ulp <= max_ulp, f"{op_name}: {name} ulp: {d}"
        if name in spec.state and state_rel_rms is not None:
            assert d.rel_rms <= state_rel_rms, f"{op_name}: state {name}: {d}"
    for p, b in zip(parents, before):
        assert bitwise_equal(p, b), f"{op_name}: kernel wrote an input buffer"
    return diffs


def few_differ(diffs: dict, names: tuple[str, ...]) -> None:
    """bf16 results: only an f32 summation-order flip may separate them from the reference."""
    for name in names:
        d = diffs[name]
        assert d.differing <= max(2, d.numel // 100), f"{name}: too many elements differ: {d}"


# ------------------------------------------------------------------------------ kda.conv
def conv_args(sh: Shapes, rows: int, seed: int, device="cpu"):
    """``x`` is the q|k|v slice of the fused projection output ``[rows, 4I]`` (row stride 4I);
    built on the CPU, returned on ``device`` with (args, parent buffers)."""
    gen = torch.Generator().manual_seed(seed)
    inner, taps = sh.kda_inner, sh.dims.conv_taps
    C = 3 * inner
    proj = torch.randn(rows, 4 * inner, generator=gen).to(BF16)
    w = (torch.randn(C, taps, generator=gen) * 0.5).to(BF16)
    window = torch.randn(rows, taps - 1, C, generator=gen).to(BF16)
    y = torch.empty(rows, C, dtype=BF16)
    return to_device(device, {"x": proj[:, :C], "w": w, "window": window, "y": y}, (proj,))


CONV_TOL = dict(rel_rms=1e-3, exact=("window",))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rows", (1, 17))
def test_conv(rows, layout, seed, device):
    sh = _shapes(layout)
    args, _ = conv_args(sh, rows, seed, device)
    _with_seed(seed, lambda: few_differ(run_and_compare("kda.conv", sh, args, **CONV_TOL), ("y",)))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rows", (3, 5))
def test_conv_strided_views(rows, seed, device):
    sh = _shapes()
    args, parents = conv_args(sh, rows, seed, device)
    assert args["x"].stride(0) == 4 * sh.kda_inner
    _with_seed(seed, lambda: few_differ(run_on_views("kda.conv", sh, args, parents, **CONV_TOL),
                                        ("y",)))


@pytest.mark.parametrize("taps", (2, 3, 5))
def test_conv_other_taps_and_odd_width(taps, device):
    # heads 3 x dim 48: C = 432, not a multiple of the channel block
    sh = _shapes(kda_heads=3, kda_head_dim=48, conv_taps=taps)
    args, parents = conv_args(sh, 3, 7 + taps, device)
    few_differ(run_on_views("kda.conv", sh, args, parents, **CONV_TOL), ("y",))


def test_conv_full_dims_one_row(device):
    sh = Shapes(Dims.full(), Layout.published())
    args, parents = conv_args(sh, 2, 11, device)
    few_differ(run_on_views("kda.conv", sh, args, parents, **CONV_TOL), ("y",))


@pytest.mark.gpu
@pytest.mark.parametrize("rows", (17, 256))
def test_conv_full_dims_many_rows(rows, device):
    sh = Shapes(Dims.full(), Layout.published())
    args, parents = conv_args(sh, rows, 12, device)
    few_differ(run_on_views("kda.conv", sh, args, parents, **CONV_TOL), ("y",))


@pytest.mark.usefixtures("gpu_launch")
def test_conv_rows_per_program(monkeypatch, device):
    # the row loop tail: 17 rows over 8 rows per program, 256-wide channel blocks
    table = dict(tunables_mod.table())
    table["kda.conv.rows_per_program"] = (8, table["kda.conv.rows_per_program"][1])
    table["kda.conv.block_c"] = (256, table["kda.conv.block_c"][1])
    monkeypatch.setattr(tunables_mod, "_TABLE", table)
    sh = _shapes(kda_heads=3, kda_head_dim=48)
    args, parents = conv_args(sh, 17, 5, device)
    few_differ(run_on_views("kda.conv", sh, args, parents, **CONV_TOL), ("y",))


# ------------------------------------------------------------------------------ kda.core
def core_args(sh: Shapes, rows: int, seed: int, device="cpu"):
    """Realistic magnitudes: q|k|v are SiLU outputs of ~N(0,1), the gate and beta are slices of
    the fused projections (strided), g ~ N(0,1), dt_bias ~ N(0, 0.5), a_log = log U(1, 16),
    gamma ~ 1 + N(0, 0.1), a state with entries ~ N(0, 0.3) in the configured dtype."""
    gen = torch.Generator().manual_seed(seed)
    h, D = sh.kda_heads, sh.dims.kda_head_dim
    inner = h * D
    sdt = BF16 if sh.dims.kda_state_dtype == "bf16" else F32
    proj = torch.randn(rows, 4 * inner, generator=gen).to(BF16)
    qkv = torch.nn.functional.silu(torch.randn(rows, 3 * inner, generator=gen) * 1.5).to(BF16)
    ab = torch.randn(rows, sh.ab_width, generator=gen).to(BF16)
    args = {
        "qkv": qkv,
        "gate": proj[:, 3 * inner:],
        "beta": ab[:, :h],
        "g": torch.randn(rows, inner, generator=gen).to(BF16),
        "dt_bias": (torch.randn(inner, generator=gen) * 0.5).to(BF16),
        "a_log": torch.log(1.0 + 15.0 * torch.rand(h, generator=gen)),
        "gamma": (1.0 + 0.1 * torch.randn(D, generator=gen)).to(BF16),
        "state": (torch.randn(rows, h, D, D, generator=gen) * 0.3).to(sdt),
        "o": torch.empty(rows, inner, dtype=BF16),
    }
    return to_device(device, args, (proj, ab))


CORE_TOL = dict(rel_rms=1e-3)
F32_STATE_REL_RMS = 1e-5


def check_core(sh, rows, seed, device, views=False):
    args, parents = core_args(sh, rows, seed, device)
    bf16_state = sh.dims.kda_state_dtype == "bf16"
    if views:
        diffs = run_on_views("kda.core", sh, args, parents, **CORE_TOL,
                             state_rel_rms=None if bf16_state else F32_STATE_REL_RMS)
    else:
        diffs = run_and_compare("kda.core", sh, args, **CORE_TOL)
    few_differ(diffs, ("o", "state") if bf16_state else ("o",))
    if sh.dims.kda_state_dtype == "f32":
        assert diffs["state"].rel_rms <= F32_STATE_REL_RMS, f"f32 state: {diffs['state']}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("state_dtype", ("bf16", "f32"))
@pytest.mark.parametrize("rows", AWKWARD_ROWS)
def test_core(rows, state_dtype, seed, device):
    sh = _shapes(kda_state_dtype=state_dtype)
    _with_seed(seed, lambda: check_core(sh, rows, seed, device))


@pytest.mark.usefixtures("gpu_launch")
@pytest.mark.parametrize("state_dtype", ("bf16", "f32"))
def test_core_gpu_launch(state_dtype, device):
    """The GPU's launch shape (one program per (row, head)) through the interpreter too."""
    sh = _shapes(("tp2", 1), kda_state_dtype=state_dtype)
    _with_seed(FRESH_SEED, lambda: check_core(sh, 17, FRESH_SEED, device))


@pytest.mark.parametrize("state_dtype", ("bf16", "f32"))
@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_core_tp2(layout, state_dtype, device):
    # a rank's local heads (2 of 4); the kernel sees only local tensors, so ranks compute alike
    sh = _shapes(layout, kda_state_dtype=state_dtype)
    _with_seed(FRESH_SEED, lambda: check_core(sh, 3, FRESH_SEED, device))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("state_dtype", ("bf16", "f32"))
def test_core_strided_views(state_dtype, seed, device):
    sh = _shapes(kda_state_dtype=state_dtype)
    _with_seed(seed, lambda: check_core(sh, 5, seed, device, views=True))


@pytest.mark.parametrize("state_dtype", ("bf16", "f32"))
def test_core_odd_head_dim(state_dtype, device):
    # head dim 48 (padded to 64 lanes), 3 heads
    sh = _shapes(kda_heads=3, kda_head_dim=48, kda_state_dtype=state_dtype)
    check_core(sh, 3, 21, device, views=True)


@pytest.mark.parametrize("state_dtype", ("bf16", "f32"))
def test_core_full_dims(state_dtype, device):
    # 12 heads x 128 x 128 per rank, as on the H200
    sh = Shapes(Dims.full(kda_state_dtype=state_dtype), Layout.published())
    check_core(sh, 2, 31, device, views=True)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", (17, 256))
@pytest.mark.parametrize("state_dtype", ("bf16", "f32"))
def test_core_full_dims_many_rows(state_dtype, rows, device):
    """The benchmark's batch sizes (17: the split path; 256: past split_rows_max, fused)."""
    sh = Shapes(Dims.full(kda_state_dtype=state_dtype), Layout.published())
    check_core(sh, rows, 32, device, views=True)


@pytest.mark.parametrize("split,dv_chunk", ((1, 16), (2, 128), (4, 8), (16, 128)))
@pytest.mark.parametrize("head_dim", (32, 48))
@pytest.mark.parametrize("state_dtype", ("bf16", "f32"))
@pytest.mark.usefixtures("gpu_launch")
def test_core_tunable_paths(monkeypatch, split, dv_chunk, head_dim, state_dtype, device):
    """The dv split (second kernel for norm x gate) and the dv-chunk loop (fused norm over
    chunks), including slices of 2 rows and a padded head dim (48 in 64 lanes)."""
    table = dict(tunables_mod.table())
    for name, value in (("split_v", split), ("split_rows_max", 256), ("dv_chunk", dv_chunk)):
        table[f"kda.core.{name}"] = (value, table[f"kda.core.{name}"][1])
    monkeypatch.setattr(tunables_mod, "_TABLE", table)
    sh = _shapes(kda_heads=3, kda_head_dim=head_dim, kda_state_dtype=state_dtype)
    check_core(sh, 3, 41 + split, device, views=True)


def test_core_repeated_steps_stay_close(device):
    """Eight steps in a row feeding the state back: the kernel's state tracks the reference's
    (a wrong decay or update direction drifts quickly)."""
    sh = _shapes(kda_state_dtype="f32")
    args, _ = core_args(sh, 3, 51, device)
    ref_state = args["state"].clone()
    spec = contracts.op("kda.core")
    kern = spec.load_kernel()
    for step in range(8):
        step_args, _ = core_args(sh, 3, 100 + step, device)
        step_args["state"] = args["state"]
        kern(sh, **step_args)
        want = spec.reference(sh, **{k: v for k, v in step_args.items() if k not in ("o", "state")},
                              state=ref_state)
        ref_state = want["state"]
        d = compare(ref_state, args["state"])
        assert d.rel_rms <= F32_STATE_REL_RMS, f"step {step}: {d}"
        assert compare(want["o"], step_args["o"]).rel_rms <= CORE_TOL["rel_rms"]


def test_rooflines_count_what_moves():
    sh = Shapes(Dims.full(), Layout.published())  # 12 heads x 128, I = 1536
    rows, I, D = 16, 1536, 128
    conv = contracts.op("kda.conv").load_roofline()
    args, _ = conv_args(sh, rows, 1)
    # x (a [rows, 3I] view of a 4I-wide buffer counts 3I), w [3I, 4], y, window read + written
    assert conv(sh, args).bytes == 2 * (rows * 3 * I + 3 * I * 4 + rows * 3 * I + 2 * rows * 3 * 3 * I)
    core = contracts.op("kda.core").load_roofline()
    args, _ = core_args(sh, rows, 1)
    state_bytes = rows * 12 * D * D * 2
    inputs = 2 * (rows * 3 * I + rows * I + rows * 12 + rows * I + I + D) + 4 * 12
    assert core(sh, args).bytes == inputs + 2 * rows * I + 2 * state_bytes
    assert core(sh, args).flops == rows * 12 * (7 * D * D + 30 * D)
