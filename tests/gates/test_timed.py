"""The scorer judges what it times: the timed replays' outputs of two sides compared replay by
replay (``gates/side/timed.py``), and the decision on them (``verdict.judge_timed``), the roofline
floor and the reference sample (``gates/rules/stats.py``, ``gates/scorer.py``) as pure functions."""
from __future__ import annotations

import random

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gates.logits import logit_stats
from gates.rules import stats
from gates.rules.verdict import judge_timed
from gates.scorer import draw_secrets, reference_sample
from gates.settings import Thresholds, Tolerance
from gates.side import timed

TH = Thresholds(kl_pass=1e-4, kl_fail=5e-2, band_factor=3.0, near_tie_factor=4.0,
                max_near_tie_flips=0.02, layout_kl_pass=1e-2,
                reference={"default": Tolerance(rel_rms=1e-2)})
VOCAB = 37


def _record(seed: int, sets: list[int], rows: int, layers: int = 3) -> dict:
    """One visit's file, as ``TimedRecord.save`` writes it, for one bucket."""
    g = torch.Generator().manual_seed(seed)
    n = len(sets)
    logits = torch.randn(n, rows, VOCAB, generator=g) * 3
    top = logits.max(-1)
    return {rows: {"set": list(sets), "logits": logits, "top_val": top.values,
                   "next_token": top.indices, "state": torch.randint(0, 2**40, (n, layers, 2), generator=g),
                   "sketch": torch.randn(n, layers, rows, timed.SKETCHES, generator=g)}}


def _save(tmp_path, name, data) -> str:
    p = tmp_path / name
    torch.save(data, p)
    return str(p)


def _compare(tmp_path, a, b, sample=None):
    return timed.compare([_save(tmp_path, "a.pt", a)], [_save(tmp_path, "b.pt", b)], 4.0, "cpu", sample)


def test_equal_records_have_no_difference_and_a_changed_replay_is_named(tmp_path):
    a = _record(0, [2, 3, 4, 5], rows=3)
    same = _compare(tmp_path, a, _record(0, [2, 3, 4, 5], rows=3))["3"]
    assert same["first_raw_difference"] is None and same["first_value_difference"] is None
    assert same["logits"]["identical"] and same["sketch_rel_max"] == 0.0 and same["replays"] == 4

    b = _record(0, [2, 3, 4, 5], rows=3)
    b[3]["logits"][2, 1, 5] += 1.0  # replay 2 skipped work in one row
    b[3]["state"][3, 0, 0] ^= 1  # replay 3 wrote a different state
    got = _compare(tmp_path, a, b)["3"]
    assert got["first_raw_difference"] == {"replay": 2, "what": ["logits"]}
    assert got["first_value_difference"]["replay"] == 2
    assert not got["logits"]["identical"] and got["logits"]["rows"] == 12


def test_signed_zeros_differ_in_bytes_not_in_value(tmp_path):
    a = _record(1, [2, 3], rows=1)
    a[1]["logits"][0, 0, 0] = 0.0
    b = {1: {k: (v.clone() if isinstance(v, torch.Tensor) else list(v)) for k, v in a[1].items()}}
    b[1]["logits"][0, 0, 0] = -0.0
    got = _compare(tmp_path, a, b)["1"]
    assert got["first_raw_difference"] == {"replay": 0, "what": ["logits"]}
    assert got["first_value_difference"] is None


def test_sides_that_ran_different_input_sets_are_a_bench_bug(tmp_path):
    import pytest

    with pytest.raises(RuntimeError, match="expected the same sequence"):
        _compare(tmp_path, _record(0, [2, 3], rows=2), _record(0, [2, 4], rows=2))


def test_files_of_several_visits_are_joined_in_order(tmp_path):
    a1, a2 = _record(0, [2, 3], rows=2), _record(1, [4, 5], rows=2)
    b2 = _record(1, [4, 5], rows=2)
    b2[2]["next_token"][1, 0] += 1
    got = timed.compare([_save(tmp_path, "a1", a1), _save(tmp_path, "a2", a2)],
                        [_save(tmp_path, "b1", a1), _save(tmp_path, "b2", b2)], 4.0, "cpu")["2"]
    assert got["replays"] == 4 and got["first_raw_difference"] == {"replay": 3, "what": ["next tokens"]}


def _timed(delta: float = 0.0, sketch: float = 0.0, seed: int = 0, rows: int = 8) -> dict:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(rows, VOCAB, generator=g) * 3
    b = a + delta * torch.randn(rows, VOCAB, generator=g)
    first = None if delta == 0 and sketch == 0 else {"replay": 0, "what": ["logits"]}
    return {str(rows): {"replays": 1, "first_raw_difference": first, "first_value_difference": first,
                        "sketch_rel_max": sketch, "sketch_worst": {"replay": 0, "tensor": 0},
                        "logits": logit_stats({f"{rows}:0": a}, {f"{rows}:0": b}, 4.0)}}


def test_an_identical_claim_must_hold_for_every_timed_replay():
    for claim in ("PASS bit-identical", "PASS value-identical"):
        assert judge_timed(_timed(), {"verdict": claim}, TH, 0.05) is None
        bad = judge_timed(_timed(delta=1e-6), {"verdict": claim}, TH, 0.05)
        assert bad["check"] == "timed_outputs_identical"
        assert bad["why"].startswith("timed outputs differ from main's although the accuracy gate "
                                     "saw identical ones") and "8 rows, timed replay 0" in bad["why"]


def test_other_claims_are_held_to_the_accuracy_gates_own_rule():
    evidence = {"verdict": "PASS logit evidence"}
    assert judge_timed(_timed(delta=1e-5), evidence, TH, 0.05) is None  # rounding-level
    big = judge_timed(_timed(delta=3.0), evidence, TH, 0.05)  # work skipped: logits move
    assert big["check"] == "timed_outputs_accuracy" and "FAIL" in big["why"]
    # a band the gate measured for this commit widens the bar as it widened the gate's
    mid = _timed(delta=0.02)
    kl = mid["8"]["logits"]["kl_max"]
    assert TH.kl_pass < kl < TH.kl_fail
    assert judge_timed(mid, evidence, TH, 0.05)["check"] == "timed_outputs_accuracy"
    band = {**mid["8"]["logits"], "kl_max": kl, "flips_near_tie": 0, "flips_confident": 0}
    assert judge_timed(mid, {"verdict": "PASS within noise floor", "band": band}, TH, 0.05) is None


def test_a_state_far_from_mains_fails_whatever_the_logits():
    got = judge_timed(_timed(delta=1e-5, sketch=0.9), {"verdict": "PASS logit evidence"}, TH, 0.05)
    assert got["check"] == "timed_outputs_accuracy" and "recurrent state" in got["why"]
    assert judge_timed(_timed(delta=1e-5, sketch=0.01), {"verdict": "PASS logit evidence"}, TH,
                       0.05) is None


def test_a_bench_alone_still_refuses_gross_differences():
    assert judge_timed(_timed(delta=3.0), None, TH, 0.05)["check"] == "timed_outputs_accuracy"
    assert judge_timed(_timed(), None, TH, 0.05) is None


@settings(max_examples=60, deadline=None)
@given(ms=st.dictionaries(st.sampled_from([16, 32, 64, 128, 256]),
                          st.floats(min_value=0.01, max_value=500.0), min_size=1),
       gb=st.floats(min_value=0.001, max_value=100.0), tbps=st.floats(min_value=0.5, max_value=5.0))
def test_below_floor_fires_exactly_when_a_median_beats_bytes_over_bandwidth(ms, gb, tbps):
    floor_bytes = {b: gb * 1e9 for b in ms}
    got = stats.below_floor(ms, floor_bytes, tbps * 1e12)
    fast = [b for b, m in ms.items() if m < gb * 1e9 / (tbps * 1e12) * 1e3]
    assert (got is None) == (not fast)
    if got:
        assert got["check"] == "roofline_floor" and sorted(got["buckets"]) == sorted(fast)
        assert got["why"].startswith("faster than the roofline floor")
    assert stats.below_floor(ms, floor_bytes, None) is None  # the CPU: no measured ceiling


@given(calls=st.dictionaries(st.sampled_from(["moe.experts", "kda.core", "mla.topk", "lm_head.argmax"]),
                             st.integers(1, 100)), per_op=st.integers(1, 4), seed=st.integers(0, 99))
def test_the_reference_sample_checks_per_op_calls_of_every_op_that_has_more(calls, per_op, seed):
    got = reference_sample(calls, per_op, random.Random(seed))
    assert got == reference_sample(calls, per_op, random.Random(seed))  # pure given the rng
    for op, n in calls.items():
        if n > per_op:
            assert len(set(got[op])) == per_op and all(0 <= i < n for i in got[op])
        else:
            assert op not in got  # checked whole


def test_each_run_draws_its_own_secrets():
    rng = random.SystemRandom()
    assert draw_secrets(rng) != draw_secrets(rng)


def _bench_result(pct: float, cls: str = "faster", checks=()) -> dict:
    return {"outcome": "ok", "processes": {"A": 2, "B": 1}, "secrets": {},
            "analysis": {"ab": {"classification": cls, "delta_pct": pct, "band": 1.0,
                                "delta": {"delta": pct, "low": pct - 1, "high": pct + 1}},
                         "sides": {"A": {"buckets": {16: {"median": 100.0}}},
                                   "B": {"buckets": {16: {"median": 100.0 + pct}},
                                         "failed_checks": list(checks)}}}}


def test_only_a_clean_gain_above_the_bar_is_measured_again():
    from gates.rules.decision import needs_reverify

    assert needs_reverify(_bench_result(-20.0), 15.0)
    assert not needs_reverify(_bench_result(-10.0), 15.0)
    assert not needs_reverify(_bench_result(-20.0, checks=[{"check": "hidden_time"}]), 15.0)
    assert not needs_reverify(_bench_result(+20.0, "slower"), 15.0)
    assert not needs_reverify({"outcome": "timeout"}, 15.0) and not needs_reverify(None, 15.0)


def test_a_large_gain_merges_only_when_the_second_measurement_reproduces_it():
    from gates.rules.scope import ScopeResult
    from harness.pipeline import decide_outcome

    test = {"verdict": "PASS bit-identical", "reasons": [], "evidence": {"outcome_a": "ok", "outcome_b": "ok"}}
    guard = {"guard_ok": True, "guard": "guard ok"}

    def bench(again):
        b = _bench_result(-40.0)
        b["buckets"] = [16]
        b["analysis"]["ab"].update(guard)
        b["analysis"]["ab"]["delta"]["buckets"] = {16: {"delta": -40.0, "low": -41, "high": -39}}
        b["analysis"]["sides"]["B"]["graph_matches_eager"] = True
        b["reverify"] = again
        return b

    ok = ScopeResult(True, [])
    merged = decide_outcome(ok, test, bench(_bench_result(-38.0)))
    assert merged.state == "merged" and merged.fields["gate"].reverify.delta_pct == -38.0
    lost = decide_outcome(ok, test, bench(_bench_result(-1.0, "within noise")))
    assert (lost.state, lost.reason) == ("abandoned", "scorer check")
    check = lost.fields["gate"].scorer.checks[0]
    assert check["check"] == "reverify" and "-40.0 % gain was not reproduced" in check["why"]
    assert lost.fields["gate"].reverify.classification == "within noise"
    died = decide_outcome(ok, test, bench({"outcome": "timeout", "error": "no answer"}))
    assert died.fields["gate"].scorer.checks[0]["check"] == "reverify"


def test_a_tunables_change_touches_the_ops_whose_tunables_changed_and_nothing_else_of_the_file():
    from gates.accuracy import touched_ops, tunables_changed

    old = '"""knobs"""\n\nTUNABLES = {\n    "moe.router.num_warps": (4, (1, 2, 4, 8)),\n    "moe.experts.block_m": (16, (16, 32)),\n}\n'
    new = old.replace('"moe.experts.block_m": (16,', '"moe.experts.block_m": (32,')
    assert tunables_changed(old, new) == {"moe.experts.block_m"}
    assert touched_ops(["kernels/k31/moe/tunables.py"], lambda p: (old, new)) == {"moe.experts"}
    # code beside the literal, a dict that is not a literal, a new file: cannot tell -> all ops
    assert tunables_changed(old, new + "import os\n") is None
    assert tunables_changed(old, new.replace("(32, (16, 32))", "(int('32'), (16, 32))")) is None
    assert tunables_changed(None, new) is None
    assert touched_ops(["kernels/k31/moe/tunables.py"], lambda p: (old, "x = (")) is None
    # a tunable no op owns, or another file no op owns, is 'all' as before
    odd = new.replace('"moe.router.num_warps"', '"moe.nothing.num_warps"')
    assert touched_ops(["kernels/k31/moe/tunables.py"], lambda p: (old, odd)) is None
    assert touched_ops(["kernels/k31/moe/tunables.py", "kernels/k31/step.py"], lambda p: (old, new)) is None


def test_main_in_memory_against_files_and_a_sample_as_large_as_the_gates_evidence(tmp_path):
    a = _record(0, [2, 3, 4, 5], rows=16)
    b = _record(0, [2, 3, 4, 5], rows=16)
    b[16]["logits"] += 1e-3 * torch.randn(b[16]["logits"].shape, generator=torch.Generator().manual_seed(5))
    got = timed.compare([a], [_save(tmp_path, "b.pt", b)], 4.0, "cpu", {"rows": 10, "seed": 3})["16"]
    assert got["logits"]["rows"] == 64 and got["logits_sample"]["rows"] == 10
    again = timed.compare([a], [_save(tmp_path, "b2.pt", b)], 4.0, "cpu", {"rows": 10, "seed": 3})["16"]
    assert again["logits_sample"] == got["logits_sample"]  # drawn from the run's seed
    assert timed.sample_quota({2: 6, 4: 12}, 6) == {2: 2, 4: 4}
    assert timed.sample_quota({2: 1, 4: 1000}, 5) == {2: 1, 4: 5}  # one row at least, at most all


def test_row_digests_tell_rows_apart_and_name_the_row_that_changed():
    t = torch.randn(5, 33)
    d = timed.row_digests(t)
    assert d.shape == (5, 2) and torch.equal(d, timed.row_digests(t.clone()))
    u = t.clone()
    u[3, 7] = torch.nextafter(u[3, 7], torch.tensor(float("inf")))
    changed = (timed.row_digests(u) != d).any(1)
    assert changed.tolist() == [False, False, False, True, False]
    swapped = t.clone()
    swapped[1, [0, 1]] = swapped[1, [1, 0]]
    assert (timed.row_digests(swapped)[1] != d[1]).any()  # positions count, not only values


def test_the_rule_judges_the_sample_when_there_is_one():
    from gates.rules.verdict import judge_timed

    t = _timed(delta=3.0)
    calm = _timed(delta=1e-6)["8"]["logits"]
    t["8"]["logits_sample"] = calm  # the drawn rows happen to agree: the sample decides
    assert judge_timed(t, {"verdict": "PASS logit evidence"}, TH, 0.4) is None
    t["8"]["logits_sample"] = t["8"]["logits"]
    bad = judge_timed(t, {"verdict": "PASS logit evidence"}, TH, 0.4)
    assert bad["check"] == "timed_outputs_accuracy" and "drawn at random" in bad["why"]


def test_the_pinned_pass_references_per_op_calls_of_each_op_drawn_by_the_seed():
    from gates.side.tap import reference_picks

    calls = [{"op": "moe.experts", "kept": True}] * 10 + [{"op": "moe.situ", "kept": True}] * 2 + \
        [{"op": "kda.core"}] * 5  # not kept: not pinned
    got = reference_picks(calls, 4, "7/r16")
    assert got == reference_picks(calls, 4, "7/r16") and got != reference_picks(calls, 4, "8/r16")
    assert len([i for i in got if i < 10]) == 4 and {10, 11} <= got and not (got & set(range(12, 17)))
    assert reference_picks(calls, 0, "7/r16") is None  # 0: every call


# ------------------------------------------------------------------ what one timed replay is
def test_a_timed_replay_is_its_input_set_alone_and_leaves_the_model_as_it_found_it():
    """Replay protocol 3 (issue 35), in process on the small model: replay n runs input set n
    (tokens no row decodes twice, positions advanced by n, the seeded recurrent state scaled per
    row and set), so the same set replayed in another process after other sets gives the same
    outputs byte for byte; and a series of replays leaves every state tensor (the MLA caches
    included: the slots a replay wrote are put back) as the series found it, apart from the
    recurrent rows each replay sets before it runs."""
    from gates.protocol import BenchOptions
    from gates.side.replays import CapturedSteps

    opts = BenchOptions(model="small", layout="tp2", seed=0, weight_sets=1, context=96, steps=12,
                        rows=[2])

    def run(first: int, n: int):
        bench = CapturedSteps(opts, "cpu", sketch_seed=5, claim="bit")
        bench.prepare()
        caches = {k: t.clone() for k, t in bench.side.model.state.tensors()
                  if not k.startswith(("kda_state", "conv_window"))}
        out = bench.time(2, n, first)
        assert out["checks"]["unwritten_or_invalid"] == 0 and out["checks"]["repeated_outputs"] == 0
        after = dict(bench.side.model.state.tensors())
        assert all(torch.equal(after[k], t) for k, t in caches.items()), \
            [k for k, t in caches.items() if not torch.equal(after[k], t)]
        kept = bench.record.pending[2]
        return {r["set"]: (r["logits_rows"], r["top_val"], r["next_token"], r["state"]) for r in kept}

    one = run(2, 3)  # sets 2, 3, 4
    two = run(4, 2)  # sets 4, 5 in a fresh process-like bench: set 4 after nothing else
    assert sorted(one) == [2, 3, 4] and sorted(two) == [4, 5]
    assert all(torch.equal(a, b) for a, b in zip(one[4], two[4]))
    assert not torch.equal(one[3][0], one[4][0])  # other sets, other outputs


def test_timed_inputs_never_repeat_a_rows_token_position_or_state():
    """What a per-row cache would key on: within a judgment's sets, no row decodes a token
    twice, its position advances by one a set, and its state's scale differs from set to set;
    at the gpu profile's size the workload's plain stream repeats a third of (row, token) pairs
    (the protocol before issue 35 timed those)."""
    from kernels.k31.config import Dims
    from kernels.k31.workload import Workload

    w = Workload(vocab=Dims.full().vocab, rows=256, context=131072, steps=136, seed=7)
    tok, pos, scale = w.timed_inputs("cpu")
    for r in range(w.rows):
        assert len(set(tok[:, r].tolist())) == w.steps
        assert len(set(scale[:, r].tolist())) == w.steps
    assert torch.equal(pos[1:] - pos[:-1], torch.ones(w.steps - 1, w.rows, dtype=torch.int32))
    assert int(pos.max()) < w.position_bound
    plain = [w.step_tokens(i) for i in range(2, w.steps)]
    repeats = sum(1 for r in range(w.rows) for s in range(len(plain))
                  if plain[s][r] in {plain[k][r] for k in range(s)})
    assert repeats > w.rows * len(plain) // 4


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 8), steps=st.integers(1, 200))
def test_a_rows_timed_tokens_are_distinct_whatever_the_seed(seed, rows, steps):
    from kernels.k31.config import Dims
    from kernels.k31.workload import Workload, tokens

    w = Workload(vocab=Dims.small().vocab, rows=rows, context=96, steps=steps, seed=seed)
    got = w.timed_tokens()
    assert len(got) == steps and all(len(s) == rows for s in got)
    corpus = set(tokens(w.vocab))
    for r in range(rows):
        col = [s[r] for s in got]
        assert len(set(col)) == steps and set(col) <= corpus
    assert all(0.75 <= f < 1.25 for f in w.state_scale(steps - 1))
