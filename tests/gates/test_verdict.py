"""The accuracy gate's verdict as a pure function of its evidence (first match wins)."""
from __future__ import annotations

import torch

from gates.verdict import judge, logit_stats, tap_diff

TH = {"kl_pass": 1e-4, "kl_fail": 5e-2, "band_factor": 3.0, "near_tie_factor": 4.0,
      "max_near_tie_flips": 0.02, "reference": {"default": {"rel_rms": 1e-2}}}


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
          "tap": tap_diff(a_pass, b_pass), "logits": logit_stats(la, lb, TH["near_tie_factor"])}
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
    band = logit_stats(la, lref, TH["near_tie_factor"])
    ev = _ev(a, b, la, lb, outcome_noise="ok", band=band)
    assert ev["logits"]["kl_max"] > TH["kl_pass"], "the case must be outside logit evidence"
    v = judge(ev, TH)
    assert v.name == "PASS within noise floor", v.reasons
