"""The scorer's statistics as pure functions: properties (the decision under simulated timing
noise, at kern.yaml's defaults, is tests/gates/test_noise.py)."""
from hypothesis import given, settings
from hypothesis import strategies as st

from gates.rules import stats

BUCKETS = [16, 32, 64, 128, 256]
WEIGHTS = [1, 2, 4, 4, 2]
BASE_MS = {16: 20.0, 32: 22.0, 64: 25.0, 128: 31.0, 256: 45.0}


samples_st = st.lists(st.floats(min_value=1.0, max_value=100.0), min_size=3, max_size=40)


@settings(max_examples=60, deadline=None)
@given(xs=samples_st, shift=st.floats(min_value=0.0, max_value=10.0))
def test_interval_contains_the_point_estimate_and_moves_with_a_shift(xs, shift):
    a = {16: xs}
    b = {16: [x + shift for x in xs]}
    d = stats.bootstrap_delta(a, b, [16], [1], iters=200, seed=0)
    assert d["low"] <= d["delta"] + 1e-9 and d["delta"] <= d["high"] + 1e-9
    assert abs(d["delta"] - shift) < 1e-6


@given(low=st.floats(-5, 5), width=st.floats(0, 5), band=st.floats(0, 3))
def test_classification_is_ordered(low, width, band):
    high = low + width
    c = stats.classify(low, high, band)
    assert c in ("faster", "slower", "within noise")
    if c == "faster":
        assert high < -band
    if c == "slower":
        assert low > band
    # moving the whole interval down never makes it slower
    c2 = stats.classify(low - 1, high - 1, band)
    order = {"faster": 0, "within noise": 1, "slower": 2}
    assert order[c2] <= order[c]


def test_guard_names_the_bucket_that_got_slower():
    a = {b: [BASE_MS[b]] * 20 for b in BUCKETS}
    b_ = {b: [BASE_MS[b] * (1.05 if b == 16 else 0.97)] * 20 for b in BUCKETS}
    d = stats.bootstrap_delta(a, b_, BUCKETS, WEIGHTS, iters=100, seed=0)
    g = stats.guard(a, b_, BUCKETS, 2.0, d["buckets"])
    assert not g.ok and g.worst_bucket == 16 and "16 rows" in g.text()


def test_score_is_the_weighted_mean_of_medians():
    med = {b: float(i + 1) for i, b in enumerate(BUCKETS)}
    assert stats.score(med, BUCKETS, WEIGHTS) == (1 * 1 + 2 * 2 + 4 * 3 + 4 * 4 + 2 * 5) / 13


@settings(max_examples=40, deadline=None)
@given(base=st.lists(st.floats(min_value=5.0, max_value=50.0), min_size=4, max_size=30),
       spread=st.lists(st.floats(min_value=0.9, max_value=1.1), min_size=30, max_size=30),
       gain=st.floats(min_value=-0.05, max_value=0.05))
def test_paired_delta_sees_through_the_inputs_own_cost(base, spread, gain):
    """Each input's own cost (``spread``) multiplies both sides' replay alike: the paired delta
    is exactly the gain, with no width, however large that cost is."""
    a = {16: [x * f for x, f in zip(base, spread)]}
    b = {16: [x * (1 + gain) for x in a[16]]}
    d = stats.paired_delta(a, b, [16], [1], iters=100, seed=0)
    want = stats.median(a[16]) * gain
    assert abs(d["delta"] - want) < 1e-9 * max(1.0, abs(want)) + 1e-9
    assert abs(d["high"] - d["low"]) < 1e-9 + 1e-9 * abs(want)
    visits = {16: [i % 2 for i in range(len(base))]}
    band = stats.paired_noise_band(a, b, visits, [16], [1], floor_pct=0.0, iters=100, seed=1)
    assert band < 1e-6 * stats.median(a[16])  # a uniform gain does not widen A's own band


def test_paired_samples_must_pair():
    import pytest

    with pytest.raises(ValueError, match="same number of replays"):
        stats.paired_delta({16: [1.0, 2.0]}, {16: [1.0]}, [16], [1], iters=10, seed=0)
    with pytest.raises(ValueError, match="finite and positive"):
        stats.paired_delta({16: [1.0, 0.0]}, {16: [1.0, 1.0]}, [16], [1], iters=10, seed=0)
