"""The merge rule (``gates.rules.decision.decide``) over every combination of what the gates can
report, and the typed results it reads (``gates.results``) parsed from their reports."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gates.results import AccuracyResult, BenchResult, Comparison, SideScore
from gates.rules import decision as D
from gates.rules.scope import ScopeResult
from gates.scorer import analyse
from harness.settings import load
from tests.gates.candidates import ROOT

VERDICTS = ("PASS bit-identical", "PASS logit evidence", "FAIL", "INCONCLUSIVE")
ENDINGS = ("ok", "timeout", "tampered", "crash (signal SIGSEGV)", "out of memory")
CLASSES = ("faster", "slower", "within noise")
CHECK = {"check": "hidden_time", "why": "time the candidate's clock did not see"}


def accuracy(verdict="PASS bit-identical", a="ok", b="ok") -> AccuracyResult:
    return AccuracyResult(verdict, ("the reason",), outcome_a=a, outcome_b=b)


def scorer(outcome="ok", cls="faster", guard_ok=True, checks=(), graph=True, reverify=None,
           pct=-5.0) -> BenchResult:
    if outcome != "ok":
        return BenchResult(outcome, error=f"side B: {outcome}")
    a, b = 50.0, 50.0 * (1 + pct / 100)
    ab = Comparison(delta_ms=b - a, low=b - a - 0.1, high=b - a + 0.1, delta_pct=pct, band_ms=0.2,
                    classification=cls, guard_ok=guard_ok, guard="guard ok" if guard_ok else "guard: 16 rows",
                    bucket_deltas={16: b - a})
    sides = {"A": SideScore(a, {16: a}, (), True), "B": SideScore(b, {16: b}, tuple(checks), graph)}
    return BenchResult("ok", buckets=(16,), sides=sides, ab=ab, reverify=reverify)


REVERIFY = {"none": None, "reproduced": scorer(pct=-30.0), "lost": scorer(cls="within noise", pct=-1.0),
            "checks": scorer(checks=[CHECK], pct=-30.0), "died": scorer("timeout")}

TABLE = [  # (scope ok, test, bench) -> (state, reason)
    (False, accuracy(), scorer(), ("abandoned", "scope")),
    (True, None, None, ("crashed", "the accuracy gate did not run")),
    (True, accuracy(b="timeout"), None, ("timed out", "accuracy gate timeout")),
    (True, accuracy(a="crash", b="not run"), None, ("crashed", "kern test: main's side ended with crash")),
    (True, accuracy("FAIL", b="tampered"), None, ("abandoned", "accuracy")),
    (True, accuracy("FAIL", b="out of memory"), None,
     ("crashed", "kern test: the candidate's side ended with out of memory")),
    (True, accuracy("FAIL"), None, ("abandoned", "accuracy")),
    (True, accuracy("INCONCLUSIVE"), None, ("abandoned", "accuracy")),
    (True, accuracy(), None, ("crashed", "scorer: not run")),
    (True, accuracy(), scorer("timeout"), ("timed out", "scorer timeout")),
    (True, accuracy(), scorer("tampered"), ("abandoned", "scorer check")),
    (True, accuracy(), scorer("crash (signal SIGSEGV)"), ("crashed", "scorer: crash (signal SIGSEGV)")),
    (True, accuracy(), scorer(checks=[CHECK]), ("abandoned", "scorer check")),
    (True, accuracy(), scorer(graph=False), ("abandoned", "scorer check")),
    (True, accuracy(), scorer(reverify=REVERIFY["lost"], pct=-30.0), ("abandoned", "scorer check")),
    (True, accuracy(), scorer(reverify=REVERIFY["died"], pct=-30.0), ("abandoned", "scorer check")),
    (True, accuracy(), scorer(cls="slower", pct=3.0), ("abandoned", "slower")),
    (True, accuracy(), scorer(cls="within noise"), ("abandoned", "within noise")),
    (True, accuracy(), scorer(guard_ok=False), ("abandoned", "guard")),
    (True, accuracy("PASS logit evidence"), scorer(), ("merged", None)),
    (True, accuracy(), scorer(reverify=REVERIFY["reproduced"], pct=-30.0), ("merged", None)),
    # the candidate scored alone (no base: the adversarial cases' kern bench REV): its failed
    # checks decide without a comparison
    (True, accuracy(), BenchResult("ok", buckets=(16,), sides={"B": SideScore(50.0, {16: 50.0}, (CHECK,), True)}),
     ("abandoned", "scorer check")),
]


def test_the_rule_table():
    for scope_ok, test, bench, want in TABLE:
        d = D.decide(scope_ok, test, bench)
        assert (d.state, d.reason) == want, (scope_ok, test, bench)


@given(scope_ok=st.booleans(), ran=st.booleans(), verdict=st.sampled_from(VERDICTS),
       a=st.sampled_from(ENDINGS), b=st.sampled_from(ENDINGS + ("not run", None)),
       bench_ran=st.booleans(), outcome=st.sampled_from(ENDINGS), cls=st.sampled_from(CLASSES),
       guard_ok=st.booleans(), checked=st.booleans(), graph=st.booleans(),
       again=st.sampled_from(sorted(REVERIFY)))
def test_the_rule_merges_exactly_when_every_gate_says_so(scope_ok, ran, verdict, a, b, bench_ran,
                                                         outcome, cls, guard_ok, checked, graph, again):
    test = accuracy(verdict, a, b) if ran else None
    bench = scorer(outcome, cls, guard_ok, [CHECK] if checked else (), graph, REVERIFY[again],
                   pct=-30.0 if again != "none" else -5.0) if bench_ran else None
    d = D.decide(scope_ok, test, bench)
    sides_clean = ran and a == "ok" and b in ("ok", "not run", None)
    reproduced = again in ("none", "reproduced")
    merge = (scope_ok and sides_clean and verdict.startswith("PASS") and bench_ran and outcome == "ok"
             and not checked and graph and reproduced and cls == "faster" and guard_ok)
    assert (d.state == "merged") == merge and (d.reason is None) == merge
    assert d.state in ("merged", "abandoned", "crashed", "timed out")
    if not scope_ok:
        assert (d.state, d.reason, d.by) == ("abandoned", "scope", D.BY_SCOPE)
        return
    # a hang is its own state, whichever gate's side hung first
    gate_hung = ran and b == "timeout"
    scorer_hung = sides_clean and verdict.startswith("PASS") and bench_ran and outcome == "timeout"
    assert (d.state == "timed out") == (gate_hung or scorer_hung)
    # a cheat a side caught is a rejection by that gate, never a crash of the candidate
    if ran and a == "ok" and b == "tampered":
        assert (d.state, d.reason) == ("abandoned", "accuracy")
    if sides_clean and verdict.startswith("PASS") and bench_ran and outcome == "tampered":
        assert (d.state, d.reason) == ("abandoned", "scorer check")
    # main's own side failing blames no candidate: a crash that names main
    if ran and a != "ok" and b != "timeout":
        assert d.state == "crashed" and "main's side" in d.reason
    # the failed checks the rule names are the scorer's, then the re-measurement's
    if d.by == D.BY_CHECKS:
        names = [c["check"] for c in d.checks]
        assert names == (["hidden_time"] if checked else []) + ([] if reproduced else ["reverify"])


def test_a_re_measurement_that_did_not_reproduce_the_gain_says_what_it_found():
    first = scorer(pct=-30.0)
    assert D.reverify_check(first) is None
    assert D.reverify_check(first.with_reverify(REVERIFY["reproduced"])) is None
    lost = D.reverify_check(first.with_reverify(REVERIFY["lost"]))
    assert lost["check"] == "reverify" and "-30.0 % gain was not reproduced" in lost["why"] \
        and "within noise" in lost["why"]
    died = D.reverify_check(first.with_reverify(REVERIFY["died"]))
    assert "did not finish (timeout: side B: timeout)" in died["why"]
    checked = D.reverify_check(first.with_reverify(REVERIFY["checks"]))
    assert "failed checks ['hidden_time']" in checked["why"]


def _report(speedup: float = 0.1) -> dict:
    """A report as ``run_bench`` writes one, analysed by the scorer's own statistics."""
    buckets, weights = [4, 16], [1, 2]
    cfg = load(ROOT / "kern.yaml").resolve(True).bench  # the section's own noise floor
    blocks = {k: [{b: [10.0 * b * f] * 3 for b in buckets}] * 2
              for k, f in (("A", 1.0), ("B", 1 - speedup))}
    samples = {k: {b: [x for v in blocks[k] for x in v[b]] for b in buckets} for k in blocks}
    checks = {k: [{"bucket": b, "unwritten_or_invalid": 0, "nonfinite": 0, "repeated_outputs": 0}
                  for b in buckets] for k in blocks}
    result = {"verify": {k: {b: {"equal": True} for b in buckets} for k in blocks}}
    return {"outcome": "ok", "buckets": buckets, "hidden": {"input_seed": 5}, "processes": {"A": 1, "B": 1},
            "analysis": analyse(samples, blocks, checks, result, cfg, buckets, weights)}


def test_a_report_parses_into_the_fields_the_loop_decides_on_also_from_its_json():
    rep = _report()
    res = BenchResult.of(rep)
    assert res.outcome == "ok" and res.buckets == (4, 16) and res.report is rep
    assert res.a.medians == {4: 40.0, 16: 160.0} and res.b.medians[16] == 160.0 * 0.9
    assert res.ab.classification == "faster" and res.ab.guard_ok and res.ab.delta_ms < 0
    assert set(res.ab.bucket_deltas) == {4, 16} and res.hidden == {"input_seed": 5}
    # a report read back from a file (--out, a judgment file) has string bucket keys
    again = BenchResult.of(json.loads(json.dumps(rep)))
    assert (again.a, again.b, again.ab) == (res.a, res.b, res.ab)
    assert BenchResult.of(res) is res
    t = AccuracyResult.of({"verdict": "PASS logit evidence", "reasons": ["KL 1e-6"], "exit_code": 0,
                           "evidence": {"outcome_a": "ok", "outcome_b": "ok", "logits": {"rows": 7},
                                        "band": {"kl_max": 0.1}}})
    assert t.passed and t.exit_code == 0 and t.claim["rows"] == 7 and t.claim["band"] == {"kl_max": 0.1}


def test_the_ledger_fields_are_the_same_from_a_result_and_from_its_report():
    from harness.pipeline import decide_outcome

    test = {"verdict": "PASS bit-identical", "reasons": [], "evidence": {"outcome_a": "ok", "outcome_b": "ok"}}
    for speedup in (0.1, -0.1, 0.0):
        rep = _report(speedup)
        typed = decide_outcome(ScopeResult(True), AccuracyResult.of(test), BenchResult.of(rep))
        assert typed == decide_outcome(ScopeResult(True), test, rep)
    merged = decide_outcome(ScopeResult(True), test, _report(0.1))
    assert merged.state == "merged" and merged.fields["medians_a"] == {"4": 40.0, "16": 160.0}
    assert merged.fields["gate"].guard.rows in (4, 16) and merged.fields["decision"] == "merge"


def test_the_rule_speaks_the_ledgers_words():
    from harness import ledger as L

    assert (D.MERGED, D.ABANDONED, D.CRASHED, D.TIMED_OUT) == (L.MERGED, L.ABANDONED, L.CRASHED, L.TIMED_OUT)
    reasons = {d.reason for *_, (state, reason) in TABLE for d in [D.Decision(state, reason, "")]}
    assert {L.SCOPE, L.ACCURACY, L.SLOWER, L.WITHIN_NOISE, L.GUARD} <= reasons
