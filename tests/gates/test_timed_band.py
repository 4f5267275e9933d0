"""The scorer's bar where it judges (issue 35 item 1): main's band at the scorer's context on the
sampled timed rows (``gates/side/timed.py`` ``sample_picks``, ``band_totals``;
``gates/logits.py`` ``cluster_totals``) and the band rule over it (``verdict.judge_band``,
``verdict.judge_timed`` with ``band``), as pure functions.

The numbers of the simulated samples follow attempt #9 at 128k on the H200 (issue 35): main
against the fp32 reference moved 19 of 2 976 timed rows above kl_pass (0.64 %, mean KL 1.83e-4),
from near-ties in DSA's top-2048; the gate judged 1 686 sampled rows over 256 requests.
"""
from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gates.logits import cluster_totals, logit_stats
from gates.rules.verdict import BAND_STATISTICS, TimedBand, band_summary, judge_band, judge_timed
from gates.settings import Thresholds, Tolerance
from gates.side import timed

TH = Thresholds(kl_pass=1e-4, kl_fail=5e-2, band_factor=3.0, near_tie_factor=4.0,
                max_near_tie_flips=0.02, layout_kl_pass=1e-2,
                reference={"default": Tolerance(rel_rms=1e-2)})
ALPHA = 0.05


# ------------------------------------------------------------------ the band's replays
@settings(max_examples=80, deadline=None)
@given(kl=st.lists(st.floats(0, 10), min_size=1, max_size=30), k=st.integers(0, 12),
       seed=st.integers(0, 2**31 - 1))
def test_the_band_runs_the_replays_furthest_from_main_again_and_as_many_drawn(kl, k, seed):
    got = timed.band_replays(kl, k, seed)
    assert got == timed.band_replays(kl, k, seed) and got == sorted(set(got))  # pure given the seed
    assert len(got) == min(k, len(kl)) and all(0 <= j < len(kl) for j in got)
    worst = sorted(range(len(kl)), key=lambda j: (-kl[j], j))[:-(-min(k, len(kl)) // 2)] if k else []
    assert set(worst) <= set(got)  # where the candidate moved furthest from main: never left out


def test_work_skipped_in_one_timed_replay_is_in_the_band_however_it_is_drawn():
    kl = [1e-6] * 48
    kl[31] = 5.0  # the candidate skipped work in replay 31 only
    assert all(31 in timed.band_replays(kl, 2, seed) for seed in range(50))


def _sides(replays: int, rows: int, vocab: int = 29, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(replays, rows, vocab, generator=g) * 3
    return a, g


def test_the_band_pairs_each_row_with_its_replay_on_the_reference_and_groups_requests(tmp_path):
    """Per request, the three pairs' totals: main against R, the candidate against R, the
    candidate against main; the rows of a request in every replay and bucket form one cluster."""
    files = {}
    for side in ("a", "b"):
        data = {}
        for bucket, seed in ((2, 0), (4, 1)):
            a, g = _sides(5, bucket, seed=seed)
            moved = a.clone()
            moved[:, 0] += 0.5 * torch.randn(moved[:, 0].shape, generator=g)  # request 0 moves on R
            logits = a if side == "a" else moved  # the candidate computes what R computes
            top = logits.max(-1)
            data[bucket] = {"set": [7 + j for j in range(5)], "logits": logits, "top_val": top.values,
                            "next_token": top.indices, "state": torch.zeros(5, 1, 2, dtype=torch.int64),
                            "sketch": torch.zeros(5, 1, bucket, timed.SKETCHES)}
        files[side] = str(tmp_path / f"{side}.pt")
        torch.save(data, files[side])
    kept = {}
    out = timed.compare([files["a"]], [files["b"]], 4.0, "cpu", {"rows": 6, "seed": 3}, keep=kept)
    assert sorted(kept) == [2, 4] and out["4"]["band_replays"] == kept[4]["replays"]
    assert kept[2]["sets"] == [7 + j for j in kept[2]["replays"]]
    assert len(kept[2]["replays"]) == 1 and len(kept[4]["replays"]) == 1  # 2 and 4 rows: 1 replay each
    ref = {b: torch.load(files["b"])[b]["logits"][kept[b]["replays"]] for b in kept}
    band = timed.band_totals(kept, ref, 4.0, 1e-4)
    assert band["clusters"] == 4 and band["rows"] == 2 + 4
    main, cand, cvm = band["main"], band["candidate"], band["candidate_vs_main"]
    assert cand["kl_sum"] == [0.0] * 4 and cand["above"] == [0.0] * 4  # B is R
    assert main["kl_sum"][0] > 0 and main["kl_sum"][1:] == [0.0] * 3  # only request 0 moved
    assert main["rows"] == [2.0, 2.0, 1.0, 1.0] and cvm["kl_sum"][0] > 0
    plain = timed.compare([files["a"]], [files["b"]], 4.0, "cpu", {"rows": 6, "seed": 3})
    assert plain == {b: {k: v for k, v in e.items() if k != "band_replays"} for b, e in out.items()}


def test_cluster_totals_add_up_to_the_logit_statistics_of_the_same_rows():
    a, g = _sides(1, 40)
    a = a[0]
    b = a + 0.3 * torch.randn(a.shape, generator=g)
    cl = torch.arange(40) % 7
    t = cluster_totals(a, b, cl, 7, 4.0, 1e-4)
    s = logit_stats({"40:0": a}, {"40:0": b}, 4.0)
    assert sum(t["rows"]) == 40 and abs(sum(t["kl_sum"]) / 40 - s["kl_mean"]) < 1e-12
    assert sum(t["flips"]) == s["flips_confident"] and t["kl_max"] == s["kl_max"]


# ------------------------------------------------------------------ the rule
def _totals(rows, kl, above, flips):
    return {"rows": list(rows), "kl_sum": list(kl), "above": list(above), "flips": list(flips),
            "kl_max": max(list(kl) + [0.0])}


def _band(main: dict, cand: dict) -> TimedBand:
    return TimedBand.of({"main": main, "candidate": cand, "candidate_vs_main": cand,
                         "ops": ["mla.index_logits"]})


clusters = st.lists(st.tuples(st.integers(1, 12), st.floats(0, 0.5), st.integers(0, 3), st.integers(0, 2)),
                    min_size=1, max_size=24)


def _from(cs):
    rows = [r for r, *_ in cs]
    return _totals(rows, [k * r for r, k, _, _ in cs], [min(a, r) for r, _, a, _ in cs],
                   [min(f, r) for r, _, _, f in cs])


@settings(max_examples=80, deadline=None)
@given(cs=clusters, seed=st.integers(0, 1000))
def test_a_candidate_no_further_than_main_in_every_request_passes(cs, seed):
    main = _from(cs)
    closer = {**main, "kl_sum": [x * 0.5 for x in main["kl_sum"]], "above": [x // 2 for x in main["above"]]}
    for cand in (main, closer):
        assert all(c.ok for c in judge_band(_band(main, cand), ALPHA, 3.0, 1e-4, 500, seed))


@settings(max_examples=80, deadline=None)
@given(cs=clusters, seed=st.integers(0, 1000), extra=st.integers(1, 5))
def test_a_candidate_further_than_main_in_every_request_is_refused(cs, seed, extra):
    """More rows above kl_pass and more KL in every request than main (beyond kl_pass): no
    resample can hide it."""
    main = _from(cs)
    rows = main["rows"]
    worse = {**main, "above": [a + min(extra, r) for a, r in zip(main["above"], rows)],
             "kl_sum": [k + r * 2e-4 for k, r in zip(main["kl_sum"], rows)]}
    checks = {c.statistic: c for c in judge_band(_band(main, worse), ALPHA, 3.0, 1e-4, 500, seed)}
    assert not checks["rows above kl_pass"].ok and not checks["mean KL"].ok
    assert checks["confident flips"].ok  # as many as main's


@settings(max_examples=60, deadline=None)
@given(cs=clusters, seed=st.integers(0, 1000), i=st.integers(0, 23), more=st.integers(1, 4))
def test_more_distance_to_the_reference_never_turns_a_refusal_into_a_pass(cs, seed, i, more):
    main = _from(cs)
    cand = _from([(r, k * 3, a + 1, f) for r, k, a, f in cs])
    i %= len(cs)
    worse = {**cand, "above": [x + (more if j == i else 0) for j, x in enumerate(cand["above"])],
             "kl_sum": [x + (more * 1e-3 if j == i else 0) for j, x in enumerate(cand["kl_sum"])]}
    before = judge_band(_band(main, cand), ALPHA, 3.0, 1e-4, 500, seed)
    after = judge_band(_band(main, worse), ALPHA, 3.0, 1e-4, 500, seed)
    for x, y in zip(before, after):
        assert y.bound >= x.bound - 1e-15 and (x.ok or not y.ok)


def test_where_main_is_clean_against_the_reference_the_candidate_must_be_too():
    """Few requests (the cpu profile's 4) cannot show a difference, but the margin holds: main
    moves no row past kl_pass, so rows the candidate moves there are more than band_factor x
    main's (the window bug on the cpu profile, measured: 6 of 12 rows, in 2 of 4 requests)."""
    main = _totals([4, 4, 2, 2], [0.0] * 4, [0] * 4, [0] * 4)
    bug = _totals([4, 4, 2, 2], [0.0649, 7.1e-4, 6.8e-5, 1.5e-4], [4, 2, 0, 0], [0] * 4)
    checks = {c.statistic: c for c in judge_band(_band(main, bug), ALPHA, 3.0, 1e-4, 2000)}
    assert checks["rows above kl_pass"].bound <= 0.0  # four requests show nothing...
    assert not checks["rows above kl_pass"].ok  # ...the margin does
    assert checks["rows above kl_pass"].allowed == 0.0 and checks["mean KL"].allowed is None
    assert all(c.ok for c in judge_band(_band(main, main), ALPHA, 3.0, 1e-4, 2000))


def _simulated(scale: float, rng, requests=256, rows=1686, rate=0.0064):
    """Main and a candidate against the reference on a sample like #9's: per request a rate of
    near-tie rows (requests differ: gamma), each such row above kl_pass with a heavy-tailed KL,
    one in twenty a confident flip; the candidate's rate ``scale`` x main's, drawn
    independently of main's (no shared near-ties: the pessimistic case for an honest change)."""
    per = rng.multinomial(rows, [1 / requests] * requests)
    rate_c = rng.gamma(1.0, rate, requests)

    def side(s):
        ev = rng.binomial(per, np.minimum(rate_c * s, 1.0))
        kl = np.array([rng.lognormal(np.log(0.01), 1.5, e).sum() for e in ev]) + per * 1e-7
        return _totals(per, kl, ev, rng.binomial(ev, 0.05))

    return _band(side(1.0), side(scale))


def test_the_rules_error_rates_on_samples_like_attempt_9s():
    """The band rule's operating characteristic, stated in docs/gates.md: an honest change as
    close as main (or closer, as #9 was) passes; one five times further or more (the
    long-context-only bug class is ~100x in mean KL and rows above kl_pass) does not."""
    rng = np.random.default_rng(35)
    trials = 100

    def passes(scale):
        return sum(all(c.ok for c in judge_band(_simulated(scale, rng), ALPHA, 3.0, 1e-4, 1000,
                                                int(rng.integers(2**31))))
                   for _ in range(trials)) / trials

    closer, same, twice, five = passes(0.75), passes(1.0), passes(2.0), passes(5.0)
    assert closer >= 0.95 and same >= 0.95, (closer, same)  # measured: 0.997, 0.98 (300 trials)
    assert twice <= 0.75 and five <= 0.02 and passes(100.0) == 0.0, (twice, five)  # 0.64, 0


# ------------------------------------------------------------------ judged with the timed outputs
def _timed_entry(delta_rows: int, kl_row_delta: float, rows: int = 64, seed: int = 0) -> dict:
    """A bucket's timed statistics whose sample moved ``delta_rows`` rows by ``kl_row_delta``."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(rows, 37, generator=g) * 3
    b = a.clone()
    b[:delta_rows] += kl_row_delta * torch.randn(delta_rows, 37, generator=g)
    s = logit_stats({f"{rows}:0": a}, {f"{rows}:0": b}, 4.0)
    return {str(rows): {"replays": 1, "first_raw_difference": {"replay": 0, "what": ["logits"]},
                        "first_value_difference": {"replay": 0, "what": ["logits"]},
                        "sketch_rel_max": 0.01, "sketch_worst": {"replay": 0, "tensor": 0},
                        "logits": s, "logits_sample": s}}


def _requests(n, above_every: int, kl_each: float):
    return _totals([4] * n, [kl_each * 4] * n, [above_every] * n, [0] * n)


def test_near_ties_beyond_kl_pass_pass_when_main_is_as_far_from_the_reference():
    """The fixed rule alone refuses (KL max above kl_pass); main's own band at this context
    shows main as far from the reference: the timed outputs pass, whatever the max."""
    t = _timed_entry(2, 0.3)
    claim = {"verdict": "PASS logit evidence"}
    assert judge_timed(t, claim, TH, 0.4)["check"] == "timed_outputs_accuracy"  # no band: refused
    main = _totals([7] * 64, [2e-4 * 7] * 64, [1 if i % 9 == 0 else 0 for i in range(64)], [0] * 64)
    cand = {**main, "above": [1 if i % 11 == 0 else 0 for i in range(64)]}
    band = {"main": main, "candidate": cand, "candidate_vs_main": cand, "ops": ["mla.index_logits"]}
    assert judge_timed(t, claim, TH, 0.4, band=band, alpha=ALPHA) is None
    got = band_summary(TimedBand.of(band), judge_band(TimedBand.of(band), ALPHA, 3.0, 1e-4, 2000))
    assert got["ok"] and got["clusters"] == 64 and [c["statistic"] for c in got["checks"]] == list(BAND_STATISTICS)


def test_the_long_context_only_bug_class_is_refused_by_the_band_rule():
    """~100x main in mean KL and rows above kl_pass, only 1.3x in KL max (issue 35)."""
    t = _timed_entry(40, 0.5)
    main = _totals([7] * 64, [1.8e-4 * 7] * 64, [1 if i % 9 == 0 else 0 for i in range(64)], [0] * 64)
    main["kl_max"] = 0.241
    bug = _totals([7] * 64, [1.8e-2 * 7] * 64, [5] * 64, [0] * 64)
    bug["kl_max"] = 0.31
    got = judge_timed(t, {"verdict": "PASS logit evidence"}, TH, 0.4,
                      band={"main": main, "candidate": bug, "candidate_vs_main": bug, "ops": ["x"]},
                      alpha=ALPHA)
    assert got["check"] == "timed_outputs_accuracy" and got["rule"] == "band"
    assert got["why"].startswith("timed outputs are further from the reference than main's at the "
                                 "scorer's context") and "mean KL" in got["why"] and "rows above" in got["why"]
    assert "KL max 0.31 against main's 0.241" in got["why"]  # reported; it decided nothing


def test_a_band_never_excuses_non_finite_rows_or_a_broken_state():
    t = _timed_entry(2, 0.3)
    t["64"]["logits"] = {**t["64"]["logits"], "nonfinite_rows": 1}  # a row the sample did not draw
    same = _requests(8, 0, 0.0)
    band = {"main": same, "candidate": same, "candidate_vs_main": same, "ops": []}
    claim = {"verdict": "PASS logit evidence"}
    got = judge_timed(t, claim, TH, 0.4, band=band, alpha=ALPHA)
    assert got["check"] == "timed_outputs_accuracy" and "NaN/Inf" in got["why"]
    t = _timed_entry(2, 0.3)
    t["64"]["sketch_rel_max"] = 0.9
    assert "recurrent state" in judge_timed(t, claim, TH, 0.4, band=band, alpha=ALPHA)["why"]


def test_the_band_is_measured_only_without_an_identical_claim_and_for_the_ops_touched():
    from gates.scorer import band_ops, needs_timed_band

    assert needs_timed_band({"verdict": "PASS logit evidence"}, 1686)
    assert needs_timed_band({"verdict": "PASS within noise floor"}, 1686)
    for claim in ("PASS bit-identical", "PASS value-identical", "FAIL", None):
        assert not needs_timed_band({"verdict": claim}, 1686)
    assert not needs_timed_band(None, 1686)
    assert not needs_timed_band({"verdict": "PASS logit evidence"}, None)  # no sample asked
    assert band_ops({"touched_ops": ["mla.topk", "mla.index_logits"]}) == ["mla.index_logits", "mla.topk"]
    assert band_ops({"touched_ops": "all"}) is None and band_ops({}) is None
