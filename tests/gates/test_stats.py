"""The scorer's statistics as pure functions: properties, and a seeded simulation of the
decision pipeline under realistic timing noise (no GPU)."""
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gates import stats

BUCKETS = [16, 32, 64, 128, 256]
WEIGHTS = [1, 2, 4, 4, 2]
BASE_MS = {16: 20.0, 32: 22.0, 64: 25.0, 128: 31.0, 256: 45.0}


def simulate(rng: random.Random, speedup: float, rounds: int = 4, replays: int = 30):
    """One A/B run: A B B A visits; per visit a drift (the GPU warming, a neighbour's load),
    per replay 0.3 % jitter and rare 5 % outliers. B is ``speedup`` faster (0.01 = 1 %)."""
    samples = {"A": {b: [] for b in BUCKETS}, "B": {b: [] for b in BUCKETS}}
    blocks = {"A": [], "B": []}
    for side in ["A", "B", "B", "A"] * rounds:
        drift = 1 + rng.gauss(0, 0.002)
        visit = {}
        for b in BUCKETS:
            mu = BASE_MS[b] * (1 - speedup if side == "B" else 1) * drift
            xs = [mu * (1 + rng.gauss(0, 0.003)) * (1.05 if rng.random() < 0.02 else 1.0)
                  for _ in range(replays)]
            samples[side][b] += xs
            visit[b] = xs
        blocks[side].append(visit)
    return samples, blocks


def decide(samples, blocks, iters=400, seed=0):
    a, b = samples["A"], samples["B"]
    d = stats.bootstrap_delta(a, b, BUCKETS, WEIGHTS, iters=iters, seed=seed)
    first = {k: [x for v in blocks["A"][0::2] for x in v[k]] for k in BUCKETS}
    last = {k: [x for v in blocks["A"][1::2] for x in v[k]] for k in BUCKETS}
    band = stats.noise_band(first, last, BUCKETS, WEIGHTS, floor_pct=0.5, iters=iters, seed=seed + 1)
    cls = stats.classify(d["low"], d["high"], band)
    g = stats.guard(a, b, BUCKETS, 2.0, d["buckets"])
    return stats.decide(cls, g.ok, True), cls


def test_no_op_commits_never_merge():
    rng = random.Random(1234)
    merged = sum(decide(*simulate(rng, 0.0), seed=i)[0][0] for i in range(100))
    assert merged == 0


def test_a_true_one_percent_gain_is_found_in_90_percent_of_trials():
    rng = random.Random(99)
    found = sum(decide(*simulate(rng, 0.01), seed=i)[1] == "faster" for i in range(60))
    assert found / 60 >= 0.9, found


def test_two_percent_extra_work_is_slower():
    rng = random.Random(7)
    (merge, why), cls = decide(*simulate(rng, -0.02))
    assert cls == "slower" and not merge and why == "slower"


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
