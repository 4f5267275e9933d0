"""The accuracy gate's verdict as a pure function of its evidence (first match wins)."""
from __future__ import annotations

import torch
from hypothesis import given, settings as hsettings, strategies as st

from gates.logits import logit_stats
from gates.rules.verdict import judge, needs_noise, own_defects, tap_diff
from gates.settings import Thresholds, Tolerance

TH = Thresholds(kl_pass=1e-4, kl_fail=5e-2, band_factor=3.0, near_tie_factor=4.0,
                max_near_tie_flips=0.02, layout_kl_pass=1e-2,
                reference={"default": Tolerance(rel_rms=1e-2)})


def _call(i, out="h1", state="s1", unwritten=0):
    return {"i": i, "op": "moe.combine", "site": f"layer {i}", "outputs": {"y": [out, out]},
            "state": {"x": [state, state]}, "unwritten": {"y": unwritten}, "nonfinite": {"y": 0},
            "outside_changed": []}


def _pass(*calls):
    return {"runs": {"r3": {"calls": list(calls)}}}


def _logits(seed, delta=0.0, rows=3):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(rows, 50, generator=g) * 3
    return {"3:0": a + delta * torch.randn(rows, 50, generator=g)}


def _ev(a_pass, b_pass, la, lb, **kw):
    ev = {"outcome_a": "ok", "outcome_b": "ok", "protected_changed": [], "same_setup": True,
          "tap": tap_diff(a_pass, b_pass), "logits": logit_stats(la, lb, TH.near_tie_factor)}
    return {**ev, **kw}


def test_equal_bytes_pass_bit_identical_and_skip_noise():
    a = _pass(_call(0), _call(1))
    v = judge(_ev(a, a, _logits(1), _logits(1)), TH)
    assert v.name == "PASS bit-identical" and v.exit_code == 0


def test_unwritten_output_fails_before_anything_else():
    a = _pass(_call(0), _call(1))
    b = _pass(_call(0), _call(1, unwritten=5))
    v = judge(_ev(a, b, _logits(1), _logits(1)), TH)
    assert v.name == "FAIL" and "not fully written" in v.reasons[0]


def test_difference_without_the_noise_passes_is_inconclusive():
    a = _pass(_call(0), _call(1))
    b = _pass(_call(0), _call(1, out="h2"))
    v = judge(_ev(a, b, _logits(1), _logits(1, 1e-3), outcome_noise="timeout"), TH)
    assert v.name == "INCONCLUSIVE" and "noise passes did not finish: timeout" in v.reasons[0]


def test_small_difference_passes_on_logit_evidence_large_fails():
    a = _pass(_call(0), _call(1))
    b = _pass(_call(0), _call(1, out="h2"))
    small = judge(_ev(a, b, _logits(1), _logits(1, 1e-4), outcome_noise="ok"), TH)
    assert small.name == "PASS logit evidence", small.reasons
    large = judge(_ev(a, b, _logits(1), _logits(1, 3.0), outcome_noise="ok"), TH)
    assert large.name == "FAIL" and any("KL" in r or "flip" in r for r in large.reasons)


def test_difference_within_the_reference_band_passes_on_the_floor():
    a = _pass(_call(0), _call(1))
    b = _pass(_call(0), _call(1, out="h2"))
    la, lb, lref = _logits(1), _logits(1, 0.03), _logits(1, 0.03)
    lb = {k: la[k] + 0.5 * (lb[k] - la[k]) for k in la}  # half the band's distance from A
    band = logit_stats(la, lref, TH.near_tie_factor)
    ev = _ev(a, b, la, lb, outcome_noise="ok", band=band)
    assert ev["logits"]["kl_max"] > TH.kl_pass, "the case must be outside logit evidence"
    v = judge(ev, TH)
    assert v.name == "PASS within noise floor", v.reasons


def test_noise_passes_run_only_when_they_can_change_the_verdict():
    """Over candidates from identical to far off (small, flipping, with defects, past the
    reference) and every kind of band and repeat A could measure: when needs_noise says no,
    the verdict without A's noise passes is the verdict with any of them (a PASS with the same
    reasons); it says yes only where some band changes it."""
    a = _pass(_call(0), _call(1))
    la = _logits(1)
    bands = [None] + [logit_stats(la, _logits(1, d), TH.near_tie_factor) for d in (1e-4, 0.03, 3.0, 30.0)]
    candidates = [(a, la, {})] + [(_pass(_call(0), _call(1, out="h2")), _logits(1, d), {})
                                  for d in (1e-5, 1e-4, 1e-2, 0.03, 0.3, 3.0)]
    candidates += [(_pass(_call(0), _call(1, unwritten=2)), _logits(1, d), {}) for d in (1e-5, 3.0)]
    far_ref = {"local": {"ops": {}, "defects": [], "diverged": [],
                         "reference_breaks": ["moe.combine rel RMS 0.5 > 0.01"]}}
    candidates.append((_pass(_call(0), _call(1, out="h2")), _logits(1, 0.03), far_ref))
    asked = kept = 0
    for b, lb, extra in candidates:
        ev = {**_ev(a, b, la, lb), **extra}
        plain = judge({**ev, "outcome_noise": "not needed"}, TH)
        need = needs_noise(ev, TH)
        verdicts = set()
        for band in bands:
            for repeat in bands:
                v = judge({**ev, "outcome_noise": "ok", "band": band, "noise": repeat,
                           "noise_tap": {"differ_raw": 1 if repeat else 0}}, TH)
                verdicts.add(v.name)
                if not need:
                    assert v.name == plain.name, (plain, v)
                    if plain.name.startswith("PASS"):
                        assert v.reasons == plain.reasons
        if need:
            assert verdicts != {plain.name}, (plain, verdicts)  # some band changes it
        asked += need
        kept += not need and not plain.name.startswith("PASS")
    assert asked >= 3 and kept >= 2  # both branches exercised, FAILs that no band excuses too
    assert not needs_noise({**_ev(a, a, la, la), "outcome_b": "timeout"}, TH)


# ------------------------------------------------------------------ sides over several ranks
RANKS = {"a": {"world": 2}, "b": {"world": 2}}


def test_candidate_ranks_that_disagree_fail_although_rank_0_is_bit_identical():
    a = _pass(_call(0), _call(1))
    v = judge(_ev(a, a, _logits(1), _logits(1),
                  ranks={**RANKS, "a_disagree": [], "b_disagree": ["3:0", "3:1"]}), TH)
    assert v.name == "FAIL" and v.exit_code == 1
    assert "candidate's 2 ranks" in v.reasons[0] and "rows 3 step 1" in v.reasons[0]
    assert "not deterministic across ranks" in v.reasons[0]


def test_base_ranks_that_disagree_leave_the_candidate_unjudged():
    a = _pass(_call(0), _call(1))
    v = judge(_ev(a, a, _logits(1), _logits(1),
                  ranks={**RANKS, "a_disagree": ["3:0"], "b_disagree": []}), TH)
    assert v.name == "INCONCLUSIVE" and "the base's 2 ranks" in v.reasons[0]


def _cross(lb, **kw):
    """B on another layout than A: only B's own defects and the logits are evidence."""
    b = _pass(_call(0), _call(1, out="other shapes"))
    return _ev(_pass(_call(0), _call(1)), b, _logits(1), lb, outcome_noise="ok",
               cross_layout="A tp1 on 1, B tp2 on 2", **kw) | {"tap": own_defects(b)}


def test_another_layout_is_judged_by_logits_and_never_called_bit_identical():
    same = judge(_cross(_logits(1)), TH)
    assert same.name == "PASS logit evidence" and "A tp1 on 1" in same.reasons[-1]
    lb = {k: v * 1.02 for k, v in _logits(1).items()}  # every logit moved, no argmax
    ev = _cross(lb)
    assert TH.kl_pass < ev["logits"]["kl_max"] <= TH.layout_kl_pass, ev["logits"]["kl_max"]
    v = judge(ev, TH)
    assert v.name == "PASS logit evidence" and "layout_kl_pass" in v.reasons[0]


def test_another_layout_far_from_the_base_fails_and_its_defects_count():
    assert judge(_cross(_logits(1, 3.0)), TH).name == "FAIL"  # a wrong shard or merge
    b = _pass(_call(0), _call(1, unwritten=4))
    ev = _cross(_logits(1)) | {"tap": own_defects(b)}
    v = judge(ev, TH)
    assert v.name == "FAIL" and "not fully written" in v.reasons[0]


# ---- each op's tolerance: kern.yaml's typed reference section, as the dict merge judged it ----
def _old_breaks(name, d, tolerances, op):
    """The rule as it read kern.yaml's parsed ``test.reference`` before the sections were typed:
    the op's keys over the default's (the oracle the typed rule must equal)."""
    tol = {**tolerances.get("default", {}), **tolerances.get(op, {})}
    if d["nan"] or d["inf"]:
        return "nonfinite"
    exact = tol.get("exact") or tol.get("exact_output") == name
    if exact and d["differing"]:
        return "exact"
    frac = tol.get("max_differing_frac")
    if frac is not None and not d.get("float", True) and d["differing"] > frac * max(1, d["numel"]):
        return "frac"
    limit = tol.get("rel_rms")
    if limit is not None and not exact and d["rel_rms"] > limit:
        return "rel_rms"
    return None


_TOL = st.fixed_dictionaries({}, optional={
    "rel_rms": st.sampled_from([1e-5, 2e-3, 1e-2]), "exact": st.booleans(),
    "exact_output": st.sampled_from(["ids", "y"]), "max_differing_frac": st.sampled_from([0.0, 1e-3, 0.5])})


@hsettings(max_examples=300, deadline=None)
@given(default=_TOL, own=_TOL, op=st.sampled_from(["mla.topk", "moe.router"]),
       name=st.sampled_from(["ids", "y"]), differing=st.integers(0, 40), numel=st.integers(1, 40),
       is_float=st.booleans(), rel_rms=st.sampled_from([0.0, 1e-6, 1e-3, 5e-3, 0.5]),
       nonfinite=st.booleans())
def test_an_ops_tolerance_judges_as_the_merged_mapping_did(default, own, op, name, differing, numel,
                                                           is_float, rel_rms, nonfinite):
    """Every tolerance kern.yaml can write (each key given or left out), every reference
    difference: the typed rule (``Thresholds.tolerance``) breaks exactly where the parsed
    mapping's merge broke, for the same reason."""
    from gates.rules.verdict import _breaks

    th = Thresholds(**{**{k: getattr(TH, k) for k in ("kl_pass", "kl_fail", "band_factor",
                                                      "near_tie_factor", "max_near_tie_flips",
                                                      "layout_kl_pass")},
                       "reference": {"default": default, op: own}})
    d = {"nan": int(nonfinite), "inf": 0, "differing": differing, "numel": numel, "float": is_float,
         "rel_rms": rel_rms, "max_ulp": 0.0}
    got = _breaks(name, d, th.tolerance(op))
    want = _old_breaks(name, d, {"default": default, op: own}, op)
    assert (got is None) == (want is None)
    words = {"nonfinite": "NaN/Inf", "exact": "expected exact", "frac": "of them", "rel_rms": "> tolerance"}
    assert want is None or words[want] in got, (got, want)


def test_kern_yaml_s_tolerances_are_the_ops_own_over_the_default():
    from harness.settings import load
    from tests.gates.candidates import ROOT

    th = load(ROOT / "kern.yaml").resolve(False).test
    assert th.tolerance("moe.router") == Tolerance(rel_rms=1e-5, max_differing_frac=1e-3)
    assert th.tolerance("mla.topk") == Tolerance(rel_rms=1e-2, exact=True)
    assert th.tolerance("moe.experts") == th.reference["default"] == Tolerance(rel_rms=1e-2)
