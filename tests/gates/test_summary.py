"""What a ledger row keeps of its judgment (``gates.summary``): made from the decision, the same
JSON as the rows the ledger has held since its first version, rows of the H200's ledger loaded
back whole, and the ledger refusing anything but the typed summary."""
from __future__ import annotations

import json
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gates.rules import decision as D
from gates.summary import (AccuracySummary, GateSummary, GuardSummary, ReverifySummary,
                           ScorerSummary, TimesSummary, summarize)
from harness.ledger import Ledger
from tests.gates.candidates import ROOT
from tests.gates.test_decision import CHECK, REVERIFY, TABLE, accuracy, scorer

H200_LEDGER = ROOT / "bench" / "journey" / "ledger.sqlite"


def summary(scope_ok, test, bench) -> GateSummary:
    return summarize(D.decide(scope_ok, test, bench), [] if scope_ok else ["a.py is protected"],
                     test, bench)


def test_each_step_of_the_rule_keeps_the_gates_up_to_the_one_that_decided():
    acc = {"verdict": "PASS bit-identical", "reasons": ["the reason"]}
    assert summary(False, accuracy(), scorer()).to_dict() == {"scope": ["a.py is protected"]}
    assert summary(True, None, None).to_dict() == {"scope": "ok"}
    assert summary(True, accuracy("FAIL"), None).to_dict() == \
        {"scope": "ok", "accuracy": {"verdict": "FAIL", "reasons": ["the reason"]}}
    assert summary(True, accuracy(), None).to_dict() == \
        {"scope": "ok", "accuracy": acc, "bench": {"outcome": "not run"}}
    assert summary(True, accuracy(), scorer("tampered")).to_dict() == \
        {"scope": "ok", "accuracy": acc, "bench": {"outcome": "tampered", "error": "side B: tampered"}}
    assert summary(True, accuracy(), scorer(checks=[CHECK])).to_dict() == \
        {"scope": "ok", "accuracy": acc, "bench": {"checks": [CHECK], "graph_matches_eager": True}}
    died = summary(True, accuracy(), scorer(reverify=REVERIFY["died"], pct=-30.0))
    assert died.scorer.checks[0]["check"] == "reverify" and died.to_dict()["reverify"] == \
        {"outcome": "timeout", "error": "side B: timeout"}
    won = summary(True, accuracy(), scorer(reverify=REVERIFY["reproduced"], pct=-30.0))
    d = won.to_dict()
    assert (d["bench"], d["guard"]) == ({"classification": "faster", "band_ms": 0.2},
                                        {"ok": True, "rows": 16, "text": "guard ok",
                                         "worst_pct": pytest.approx(-30.0)})
    assert d["reverify"] == {"outcome": "ok", "classification": "faster", "band_ms": 0.2,
                             "delta_ms": pytest.approx(-15.0), "ci": [pytest.approx(-15.1), pytest.approx(-14.9)],
                             "delta_pct": -30.0, "medians_a": {"16": 50.0}, "medians_b": {"16": 35.0},
                             "checks": []}
    assert list(d) == sorted(d) and list(d["reverify"]) == sorted(d["reverify"])  # as stored


@pytest.mark.parametrize("scope_ok, test, bench, want", TABLE)
def test_every_row_of_the_decision_table_goes_through_the_ledger_column_and_back(scope_ok, test, bench, want):
    s = summary(scope_ok, test, bench)
    assert GateSummary.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_the_h200_ledger_loads_whole_and_reports_as_recorded():
    """Rows written before the summary was typed (attempts 1-7 on the H200: a crashed accuracy
    gate, a scorer error, merges with a re-measurement) load and give back the same JSON."""
    db = sqlite3.connect(f"file:{H200_LEDGER}?immutable=1", uri=True)
    rows = db.execute("SELECT number, gate FROM attempts ORDER BY number").fetchall()
    db.close()
    assert len(rows) >= 7
    for number, text in rows:
        stored = None if text is None else json.loads(text)
        s = GateSummary.from_dict(stored)
        assert (None if s is None else s.to_dict()) == stored, number
    gates = {n: GateSummary.from_dict(json.loads(t)) for n, t in rows if t}
    assert gates[1].accuracy.verdict == "INCONCLUSIVE" and gates[3].scorer.outcome == "error"
    assert gates[4].reverify.ci == pytest.approx((-112.48, -112.02), abs=0.01)
    assert gates[4].guard.rows == 16 and gates[5].scope_problems == ()


def test_what_its_readers_ignored_is_ignored():
    assert GateSummary.from_dict(None) is None
    assert GateSummary.from_dict(["not", "an", "object"]) == GateSummary()
    s = GateSummary.from_dict({"accuracy": "FAIL", "bench": {"checks": ["x", {"check": "c"}]},
                               "guard": {"rows": 16, "someday": 1}, "conflict": 3, "tap": [1]})
    assert s == GateSummary(scorer=ScorerSummary(checks=({"check": "c"},)), guard=GuardSummary(rows=16))
    assert GateSummary.from_dict({"scope": "kern.yaml is protected"}).scope_problems == \
        ("kern.yaml is protected",)
    assert GateSummary.from_dict({"reverify": {"ci": 3}}).reverify == ReverifySummary()


def texts():
    return st.text(max_size=12)


def opt(s):
    return st.none() | s


SUMMARIES = st.builds(
    GateSummary,
    scope_problems=opt(st.lists(texts(), min_size=1, max_size=3).map(tuple) | st.just(())),
    accuracy=opt(st.builds(AccuracySummary, verdict=opt(texts()),
                           reasons=opt(st.lists(texts(), max_size=3).map(tuple)), tag=opt(texts()))),
    scorer=opt(st.builds(ScorerSummary, outcome=opt(texts()), error=opt(texts()),
                         checks=opt(st.lists(st.fixed_dictionaries({"check": texts()}), max_size=2).map(tuple)),
                         graph_matches_eager=opt(st.booleans()), classification=opt(texts()),
                         band_ms=opt(st.floats(allow_nan=False)))),
    guard=opt(st.builds(GuardSummary, ok=opt(st.booleans()), text=opt(texts()),
                        rows=opt(st.integers(1, 512)), worst_pct=opt(st.floats(allow_nan=False)))),
    reverify=opt(st.builds(ReverifySummary, outcome=opt(texts()),
                           ci=opt(st.tuples(st.floats(allow_nan=False), st.floats(allow_nan=False))),
                           medians_a=opt(st.dictionaries(texts(), st.floats(allow_nan=False), max_size=2)),
                           checks=opt(st.lists(texts(), max_size=2).map(tuple)))),
    times=opt(st.builds(TimesSummary, accuracy_s=opt(st.floats(0, 1e5)), scorer_s=opt(st.floats(0, 1e5)),
                        remeasure_s=opt(st.floats(0, 1e5)), total_s=opt(st.floats(0, 1e5)),
                        compile_main_s=opt(st.floats(0, 1e5)))),
    conflict=opt(texts()), detail=opt(texts()))


@given(SUMMARIES)
def test_a_summary_survives_its_json(s):
    assert GateSummary.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_the_ledger_keeps_the_typed_summary_and_refuses_a_dict(tmp_path):
    led = Ledger(tmp_path / "ledger.sqlite")
    n = led.new_attempt(title="t", hypothesis="", target="", backend="tuner", base_sha="b" * 40,
                        phase_id=led.phase({"buckets": [16], "weights": [1]}))
    s = summary(True, accuracy("FAIL"), None)
    led.update(n, gate=s)
    assert led.attempt(n).gate == s
    assert led.events(n)[-1].data["gate"] == s.to_dict()  # the log holds the JSON
    with pytest.raises(TypeError, match="gate must be a gates.summary.GateSummary, found dict"):
        led.update(n, gate={"scope": "ok"})
    led.close()


@pytest.mark.parametrize("spans,compile_s", [
    ((), None),  # main compiled before (its profile, an earlier judgment): nothing on this row
    ((("accuracy", "coordinator", "compile_main", 85.0), ("accuracy", "A record", "tap", 7.0)), 85.0),
])
def test_the_row_s_times_say_what_main_s_compile_took_in_this_judgment(spans, compile_s):
    from gates.rules.phases import JudgmentTimes, Span
    from harness.pipeline import Outcome, with_times

    times = JudgmentTimes(120.0, 80.0, None, 200.0, tuple(Span(*x) for x in spans))
    out = with_times(Outcome("abandoned", "within noise", {"gate": GateSummary()}), times)
    assert out.fields["gate"].times == TimesSummary(accuracy_s=120.0, scorer_s=80.0, total_s=200.0,
                                                    compile_main_s=compile_s)
