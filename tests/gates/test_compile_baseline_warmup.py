"""The compile baseline's warm-up: timed steps start only once a whole step compiled nothing."""
import pytest
from hypothesis import given, strategies as st

from gates.side.replays import warm_until_stable


@given(st.lists(st.integers(0, 5), min_size=1, max_size=12), st.integers(1, 10))
def test_warm_until_stable_stops_at_the_first_call_that_compiles_nothing(new_graphs, limit):
    # new_graphs[i]: graphs the i-th call compiles (calls past the list compile nothing)
    count, calls = [0], [0]

    def run():
        i = calls[0]
        calls[0] += 1
        count[0] += new_graphs[i] if i < len(new_graphs) else 0

    made = warm_until_stable(run, lambda: count[0], limit)
    first_quiet = next((i + 1 for i, g in enumerate(new_graphs) if g == 0), len(new_graphs) + 1)
    assert made == calls[0] == min(first_quiet, limit)


def test_a_step_that_always_compiles_is_run_limit_times():
    count = [0]

    def run():
        count[0] += 1

    assert warm_until_stable(run, lambda: count[0], 4) == 4
    assert count[0] == 4


@pytest.fixture
def dynamo_settings():
    """The compile baseline sets dynamo's process-wide limits: put them back after each test
    (read and set again by hand: dynamo's config module has no plain attributes to monkeypatch)."""
    import torch._dynamo as dynamo

    names = [n for n in ("recompile_limit", "cache_size_limit", "fail_on_recompile_limit_hit")
             if hasattr(dynamo.config, n)]
    saved = {n: getattr(dynamo.config, n) for n in names}
    yield
    for name, value in saved.items():
        setattr(dynamo.config, name, value)
    dynamo.reset()


@pytest.mark.slow
def test_the_compile_baseline_times_steps_that_compile_nothing(dynamo_settings):
    """On the small model, every reference op under torch.compile: warm-up steps until one
    compiles nothing, then timed steps that compile nothing (dynamic=False recompiled every
    new length inside them), and the model's caches as the baseline found them."""
    import torch

    from gates.protocol import BenchOptions
    from gates.side.replays import BASELINE_TRIES, BASELINE_WARM_MAX, CapturedSteps

    opts = BenchOptions(model="small", layout="tp2", seed=3, weight_sets=1, context=96, steps=12, rows=[3])
    bench = CapturedSteps(opts, "cpu", sketch_seed=11, claim="bit")
    bench.prepare()
    caches = {k: t.clone() for k, t in bench.side.model.state.tensors()
              if not k.startswith(("kda_state", "conv_window"))}
    got = bench.baseline("compile", 3, 3)
    assert "error" not in got, got
    assert len(got["times"]) == 3 and 1 <= got["warmup_steps"] <= BASELINE_WARM_MAX * BASELINE_TRIES
    assert got["compiled_ops"]
    after = dict(bench.side.model.state.tensors())
    assert all(torch.equal(after[k], t) for k, t in caches.items())


@pytest.mark.slow
def test_a_function_past_its_recompile_limit_is_an_error_not_an_eager_time(monkeypatch, dynamo_settings):
    """Past dynamo's recompile limit a frame would run eagerly without a word; the baseline
    must not time that partly eager step as the compiled one."""
    import gates.side.replays as replays
    from gates.protocol import BenchOptions

    monkeypatch.setattr(replays, "RECOMPILE_LIMIT", 1)
    opts = BenchOptions(model="small", layout="tp2", seed=5, weight_sets=1, context=96, steps=12, rows=[3])
    bench = replays.CapturedSteps(opts, "cpu", sketch_seed=13, claim="bit")
    bench.prepare()
    got = bench.baseline("compile", 3, 3)
    assert "times" not in got
    assert "compile baseline failed" in got["error"] and "limit" in got["error"].lower(), got


@pytest.mark.slow
def test_moe_experts_compiled_stops_compiling_once_each_routing_is_met(dynamo_settings):
    """Traced whole, the reference's expert loop unrolls over the call's experts and every new
    routing recompiles it; kept outside the graphs (its module's OUTSIDE_COMPILED_GRAPHS), its
    callees compile a few graphs and then no new routing compiles anything."""
    from gates.side.numerics import compare, poison, unwritten
    from gates.side.replays import CompiledReference, compiled_graphs
    from kernels.k31.config import Dims, Layout, Shapes
    from kernels.k31.contracts import OPS
    from tests.kernels.test_moe import experts_args

    sh = Shapes(Dims.small(n_experts=448, top_k=16), Layout.named("unsharded"))
    spec = OPS["moe.experts"]
    hook = CompiledReference(sh)
    added = []
    for seed in range(5):
        args = experts_args(sh, 8, seed)
        poison(args["y"])
        before = compiled_graphs()
        hook(spec, None, args, None)
        added.append(compiled_graphs() - before)
        want = spec.reference(sh, **{k: v for k, v in args.items() if k != "y"})["y"]
        assert unwritten(args["y"]) == 0
        # the compiled callees may round differently from eager (fused situ): close, not equal
        d = compare(want, args["y"])
        assert d.nan == 0 and d.rel_rms <= 5e-3, d
    assert added[0] > 0 and added[-2:] == [0, 0], added
