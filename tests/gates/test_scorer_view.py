"""gates/results.py's one view of an A/B per bucket (``ScorerView``): read alike from the
scorer's report in memory (int bucket keys) and as JSON keeps it (string keys); B/A read back
from the paired estimate; a ledger row's numbers; the report's view, else the row's."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gates.results import BenchResult, BucketTimes, BucketView, ScorerView
from gates.summary import ReverifySummary

ms = st.floats(0.5, 500.0, allow_nan=False)


def report(buckets, a, b, d, weights, bw=None, cost=None) -> dict:
    """A scorer's report as run_bench keeps it in memory (bucket keys are ints)."""
    per = {k: {"delta": d[i], "low": d[i] - 0.1, "high": d[i] + 0.1} for i, k in enumerate(buckets)}
    score = lambda m: sum(w * x for w, x in zip(weights, m)) / sum(weights)  # noqa: E731
    rep = {"outcome": "ok", "buckets": list(buckets), "weights": list(weights), "wall_s": 12.5,
           "analysis": {"sides": {
               "A": {"score": score(a), "failed_checks": [], "graph_matches_eager": True,
                     "buckets": {k: {"median": a[i], "p10": a[i] * 0.9, "p90": a[i] * 1.1, "cv": 0.01, "n": 8}
                                 for i, k in enumerate(buckets)}},
               "B": {"score": score(b), "failed_checks": [{"check": "hidden_time", "why": "x"}],
                     "graph_matches_eager": False,
                     "buckets": {k: {"median": b[i], "p10": b[i], "p90": b[i], "cv": 0.0, "n": 8}
                                 for i, k in enumerate(buckets)}}},
               "ab": {"paired": True, "band": 0.3, "classification": "faster", "guard_ok": True,
                      "guard": "guard ok", "delta_pct": -1.0,
                      "delta": {"delta": score(d), "low": score(d) - 0.1, "high": score(d) + 0.1,
                                "paired": True, "buckets": per}}}}
    if bw:
        rep["bandwidth"], rep["cost"] = {"Bps": bw}, cost
    return rep


@given(st.lists(st.tuples(ms, ms, st.integers(1, 4)), min_size=1, max_size=5))
def test_a_report_reads_the_same_in_memory_and_as_json(cols):
    buckets = [16 * 2 ** i for i in range(len(cols))]
    a = [c[0] for c in cols]
    b = [c[1] for c in cols]
    d = [y - x for x, y in zip(a, b)]
    rep = report(buckets, a, b, d, [c[2] for c in cols], 2e12, {k: {"bytes": 1e9 * k} for k in buckets})
    view = ScorerView.of(rep)
    assert view == ScorerView.of(json.loads(json.dumps(rep))) == BenchResult.of(rep).view
    assert [x.rows for x in view.buckets] == buckets and view.from_judgment and view.paired
    for x, ai, di in zip(view.buckets, a, d):
        assert x.a_ms == ai and x.delta_ms == di
        assert abs(x.a_ms * (x.ratio - 1) - di) <= 1e-9 * max(1.0, abs(di))  # B − A = A × (B/A − 1)
        assert x.ratio_interval[0] < x.ratio < x.ratio_interval[1]
        assert abs(x.floor_ms - x.rows / 2) < 1e-9 and abs(x.pct_of_floor(x.b_ms) - x.floor_ms / x.b_ms * 100) < 1e-9
    assert view.score_a == rep["analysis"]["sides"]["A"]["score"] and view.delta_ms == rep["analysis"]["ab"]["delta"]["delta"]
    assert view.to_dict()["sides"]["B"] == {"score_ms": view.score_b, "failed_checks": ["hidden_time"],
                                            "graph_matches_eager": False}


def test_a_report_without_pairs_or_keys_is_read_as_far_as_it_goes():
    rep = report([16], [20.0], [16.0], [-4.0], [1])
    rep["analysis"]["ab"].pop("paired")
    rep["analysis"]["ab"]["delta"].pop("paired")
    del rep["analysis"]["sides"]["A"]["buckets"][16]["p10"]
    (x,) = ScorerView.of(rep).buckets
    assert (x.ratio, x.a, x.delta_ms) == (None, BucketTimes(20.0, None, 22.0, 0.01, 8), -4.0)
    assert ScorerView.of(None) is None and ScorerView.of({"outcome": "timeout", "error": "e"}) == \
        ScorerView(outcome="timeout", error="e")
    assert BenchResult.of({"outcome": "timeout", "error": "e"}).view.measured is False


def test_the_report_view_else_the_ledger_rows_and_the_row_counts_the_re_measurement():
    again = ReverifySummary(outcome="ok", delta_ms=-2.0, ci=(-2.1, -1.9), delta_pct=-10.0,
                            medians_a={"16": 20.0}, medians_b={"16": 18.0}).view()
    led = ScorerView.of_ledger(-3.0, -3.2, -2.8, -15.0, {"16": 20.0}, {"16": 17.0}, reverify=again)
    assert led.buckets == (BucketView(16, a=BucketTimes(20.0), b=BucketTimes(17.0), paired=True),)
    assert led.counted is again and again.delta_ms == -2.0 and not again.from_judgment
    assert ReverifySummary(outcome="timeout").view() is None
    first = ScorerView.of(report([16], [20.0], [17.1], [-2.9], [1]))
    assert first.or_ledger(led).reverify is again  # the report holds none: the row's
    assert first.or_ledger(led).buckets == first.buckets  # the report measured: its numbers
    failed = ScorerView(outcome="timeout", error="e")
    assert failed.or_ledger(led).delta_ms == -3.0  # the report measured nothing: the row's
    assert failed.or_ledger(ScorerView.of_ledger()) is not None and not failed.or_ledger(ScorerView.of_ledger()).measured
