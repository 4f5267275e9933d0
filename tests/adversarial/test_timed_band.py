"""The scorer's bar where it judges (issue 35 item 1), on real candidate commits through ``kern
try`` on the cpu profile (``hacks.TIMED_BAND``, judged in a catalogue repository of their own).

Each candidate moves one rounding of the indexer (the scale folded into the head weights), so
the accuracy gate claims no identity ('PASS logit evidence': the indexer's outputs differ, the
logits do not at the tap's context). The scorer then keeps its timed logits, and main's side
runs a few timed replays per bucket again with mla.index_logits on the protected reference
(main's band at the scorer's context, 96 tokens here against the tap's 80): the band rule
(``verdict.judge_band``) decides whether the candidate is as close to the reference as main.

  candidate                                   what it does beyond the rounding      outcome
  index-logits-scale-ahead                    nothing (near-ties only)              no timed check fails
  index-logits-window-past-the-taps-context   past the tap's context, only the      timed_outputs_accuracy
    (the long-context-only bug class)          recent top-k tokens scored            (band rule)
  index-logits-skipped-past-the-taps-calls    no scoring once its process made more ops_match_reference
    (the scorer-only skip class)               calls at the batch size than the tap  (every draw), and the
                                                                                    band rule where the draw
                                                                                    moves a row past kl_pass

On the cpu profile main's indexer equals the reference (fp32 dots under the interpreter), so
main's band is zero and the band rule holds the candidate to the fixed rule's bar (the margin on
rows above kl_pass); on the H200 at 128k main's band is not zero (issue 35: 19 of 2 976 timed
rows above kl_pass) and the same rule passes #9-like changes: ``bash bench/gpu_evidence.sh
fairbar`` measures it (docs/results.md).
"""
from __future__ import annotations

import json

import pytest
import torch

from tests.adversarial import hacks as H

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(torch.cuda.is_available(), reason="the cpu profile's form; on the "
                                 "H200 the band is judged at full size (bench/gpu_evidence.sh fairbar)")]


def _judged(timed_band_judged, hack):
    """(Outcome, Attempt, the scorer's report) of ``hack``, asserted honest while watched:
    the accuracy gate passed it without an identical claim, so the band was measured."""
    repo, judged = timed_band_judged
    number, out, attempt = judged[hack.name]
    assert attempt.gate.accuracy.verdict == "PASS logit evidence", attempt.gate
    path = repo / f"runs-{hack.name}" / "attempts" / str(number) / "judgment-1.json"
    bench = json.loads(path.read_text())["bench"]
    assert bench["outcome"] == "ok", bench.get("error")
    band = bench["analysis"]["timed_band"]
    assert band["ops"] == ["mla.index_logits"] and band["rows"] > 0, band
    return out, attempt, bench


def _timed_checks(bench):
    """The scorer's failed checks of the candidate's timed outputs (its report)."""
    return [c for c in bench["analysis"]["sides"]["B"]["failed_checks"]
            if c.get("check", "").startswith("timed_outputs")]


def test_a_change_that_differs_from_main_by_near_ties_only_passes_the_band(timed_band_judged):
    out, attempt, bench = _judged(timed_band_judged, H.NEAR_TIES_ONLY)
    assert bench["analysis"]["timed_band"]["ok"], bench["analysis"]["timed_band"]
    assert not bench["analysis"]["sides"]["B"]["failed_checks"], bench["analysis"]["sides"]["B"]
    from gates.results import BenchResult
    from gates.rules.decision import reverify_check

    res = BenchResult.of(bench)
    assert res.b.graph_matches_eager, bench["analysis"]["sides"]["B"]
    # decided by its speed (the cpu: within noise), or, on a loaded machine, by a large gain
    # that its re-measurement did not reproduce: never by a check of its outputs
    assert out.reason != "scorer check" or reverify_check(res) is not None, out
    assert bench["timed_band_s"] > 0 and bench["judged_cost"]["band_s"] == bench["timed_band_s"]


def test_the_long_context_only_bug_is_refused_by_the_band_rule(timed_band_judged):
    """Right at the tap's context, wrong past it at every bucket: main moves no timed row past
    kl_pass against the reference, the candidate moves several."""
    out, attempt, bench = _judged(timed_band_judged, H.LONG_CONTEXT_BUG)
    assert (out.state, out.reason) == ("abandoned", "scorer check"), out
    assert any(c["check"] == "timed_outputs_accuracy" for c in attempt.gate.scorer.checks), attempt.gate
    timed = _timed_checks(bench)
    assert timed and timed[0]["check"] == "timed_outputs_accuracy" and timed[0]["rule"] == "band", timed
    assert timed[0]["why"].startswith("timed outputs are further from the reference than main's at "
                                      "the scorer's context: "), timed
    assert "rows above kl_pass (share of rows) against the reference" in timed[0]["why"], timed
    band = bench["analysis"]["timed_band"]
    rows_above = next(c for c in band["checks"] if c["statistic"] == "rows above kl_pass")
    assert rows_above["main"] == 0.0 and rows_above["candidate"] > 0 and not band["ok"], band


def _scorer_story(bench) -> str:
    """What each measurement found (the assertion's message: a failure says which check, if
    any, decided instead of the band rule)."""
    out = []
    for name, m in (("first", bench), ("re-measurement", bench.get("reverify"))):
        if not m:
            continue
        an = m.get("analysis") or {}
        b = (an.get("sides") or {}).get("B") or {}
        out.append(f"{name}: outcome {m.get('outcome')}, B failed checks "
                   f"{[(c.get('check'), c.get('why', '')[:160]) for c in b.get('failed_checks', [])]}, "
                   f"graph_matches_eager {b.get('graph_matches_eager')}, band "
                   f"{(an.get('timed_band') or {}).get('checks')}, ab {(an.get('ab') or {}).get('classification')} "
                   f"{(an.get('ab') or {}).get('delta_pct')}")
    return "; ".join(out)


def test_a_skip_past_the_taps_calls_is_refused_and_the_band_reruns_the_skipped_replay(timed_band_judged):
    """No indexer scores once the process made more calls at a batch size than the tap makes:
    the scorer's last timed replay at 4 rows, and its verify step after the timed rounds.

    The verify step's reference check of the candidate's op calls refuses it on every draw (a
    candidate cannot tell that step from a timed one). The band reruns the timed replay furthest
    from main, the skipped one, whatever the fixed rule's sample drew; whether it refuses
    depends on the draw: at the cpu profile's 96 tokens the skip's KL passes kl_pass on 0-3 of
    4 rows (CI, 2026-12-06: on none, so the band passed it and the reference check alone
    refused), at 128k every row of the skipped replay is far off. The skip counts calls per
    batch size: CI (2026-12-05) saw a count per logits buffer miss every timed replay, the
    buffers' addresses moving between visits."""
    out, attempt, bench = _judged(timed_band_judged, H.SKIP_PAST_THE_TAPS_CALLS)
    assert (out.state, out.reason) == ("abandoned", "scorer check"), (out, _scorer_story(bench))
    failed = bench["analysis"]["sides"]["B"]["failed_checks"]
    ref = [c for c in failed if c["check"] == "ops_match_reference"]
    assert ref and ref[0]["ops"] == ["mla.index_logits"], _scorer_story(bench)
    assert bench["verify"]["B"]["4"]["ops"]["mla.index_logits"]["rel_rms"] > 0.05, bench["verify"]["B"]
    at4 = bench["timed"]["4"]
    skipped_from = at4["first_value_difference"]["replay"]  # every replay after it skips too
    assert skipped_from == at4["replays"] - 1, at4
    assert any(r >= skipped_from for r in at4["band_replays"]), at4
    band = bench["analysis"]["timed_band"]
    timed = _timed_checks(bench)
    # the band's verdict is the one its statistics state: refused exactly when one failed
    assert bool(timed) == (not band["ok"]) == any(not c["ok"] for c in band["checks"]), \
        (band, timed, _scorer_story(bench))
    if timed:
        assert timed[0]["check"] == "timed_outputs_accuracy" and timed[0]["rule"] == "band", timed
