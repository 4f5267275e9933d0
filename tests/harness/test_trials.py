"""Trial merges (harness/trials.py): which near-misses combine, when a tick forms one, and the
whole path on a real repository: the parts picked onto main (a conflicting one left out),
squashed, queued, judged by the next tick and shown in the journey. The gates are test_faults'
stand-ins (their A/B goes through the scorer's real analysis): the point is the bookkeeping."""
from __future__ import annotations

import git

from harness import ledger as L
from harness import trials
from harness.journey import markdown
from harness.orchestrator import Orchestrator, TickReport
from tests.gates.candidates import candidate, context, make_repo
from tests.harness.test_faults import COMBINE_EDIT, EDIT, SITU, Gates, fake_profile, faster, queued


def _a(n, delta=-0.3, state=L.ABANDONED, reason=L.WITHIN_NOISE, phase=1, **kw):
    return L.Attempt(n, title=f"t{n}", state=state, reason=reason, delta_ms=delta, phase_id=phase,
                     base_sha="b" * 40, commit_sha=f"{n:040d}", **kw)


def test_near_misses_are_recent_faster_within_noise_of_this_phase_and_not_yet_combined():
    attempts = [_a(1, -0.2), _a(2, -0.5), _a(3, +0.4),  # 3: measured slower, another direction
                _a(4, -0.1, reason=L.SLOWER), _a(5, -0.9, state=L.MERGED, reason=None),
                _a(6, -0.3, phase=2),  # another phase: not comparable
                _a(7, None),  # never measured
                _a(8, -0.4, backend=trials.BACKEND, parts=[1, 2]),  # a trial is not a part
                _a(9, -0.6), _a(10, -0.7)]
    got = [a.number for a in trials.near_misses(attempts, 1, recent=20)]
    assert got == [10, 9]  # best gain first; 1 and 2 were combined by trial #8 already
    assert [a.number for a in trials.near_misses(attempts[:3], 1, recent=20)] == [2, 1]
    assert [a.number for a in trials.near_misses(attempts[:3], 1, recent=2)] == [2]  # only #2, #3 recent
    no_commit = L.Attempt(11, state=L.ABANDONED, reason=L.WITHIN_NOISE, delta_ms=-1.0, phase_id=1,
                          base_sha="b" * 40, commit_sha="b" * 40)  # its tip is its base
    assert trials.near_misses([no_commit], 1, recent=5) == []


def test_parts_are_the_best_few_and_at_least_two():
    c = [_a(4, -0.9), _a(2, -0.5), _a(7, -0.2)]
    assert [a.number for a in trials.pick_parts(c, 2)] == [4, 2]
    assert trials.pick_parts(c[:1], 3) == []  # one near-miss is no trial
    assert trials.pick_parts(c, 0) == []  # loop.trial_merge_parts 0: off


def test_a_trial_is_formed_by_an_idle_tick_or_a_full_set_of_near_misses_when_it_may_start_work():
    assert trials.due(True, judged=0, in_flight_trials=0, free_slots=1, ready=0, max_parts=3)
    assert not trials.due(False, 0, 0, 1, 3, 3)  # a bounded run's last tick leaves nothing half done
    assert not trials.due(True, 2, 0, 1, 0, 3)  # it judged attempts and no near-miss waits
    assert not trials.due(True, 0, 1, 1, 3, 3)  # one trial at a time
    assert not trials.due(True, 0, 0, 0, 3, 3)  # every slot held (a kern try beside the loop)
    # a tick that judged (a replay backend's every tick) still forms one for a full set
    assert trials.due(True, 2, 0, 1, ready=3, max_parts=3)
    assert trials.due(True, 2, 0, 1, ready=5, max_parts=3)
    assert not trials.due(True, 2, 0, 1, ready=2, max_parts=3)  # not full: an idle tick may take them
    assert not trials.due(True, 2, 1, 1, ready=3, max_parts=3)  # one trial at a time
    assert not trials.due(True, 2, 0, 0, ready=3, max_parts=3)  # no free slot
    assert not trials.due(False, 2, 0, 1, ready=3, max_parts=3)  # a bounded run's last tick
    assert not trials.due(True, 2, 0, 1, ready=4, max_parts=1)  # loop.trial_merge_parts < 2: off


def _near_miss(ctx, sha, title, delta):
    n = queued(ctx, sha, title)
    ctx.ledger.transition(n, L.JUDGING)
    ctx.ledger.transition(n, L.ABANDONED, reason=L.WITHIN_NOISE, delta_ms=delta, ci_low=delta - 1,
                          ci_high=delta + 1, decision=L.WITHIN_NOISE)
    return n


def test_two_near_misses_are_tried_together_judged_merged_and_shown_in_the_journey(tmp_path, monkeypatch):
    repo = make_repo(tmp_path, {"loop.concurrency": 1})  # the queued trial takes the one agent place
    fake_profile(repo, ["moe.situ"])
    base = git.Repo(repo).head.commit.hexsha
    one = candidate(repo, "one", [EDIT])
    two = candidate(repo, "two", [COMBINE_EDIT])
    clash = candidate(repo, "clash", [(SITU, "def moe_situ(", "# another comment\ndef moe_situ(")])
    gates = Gates(monkeypatch)
    ctx, settings = context(repo)
    n1 = _near_miss(ctx, one, "moe.situ: a comment", -0.5)
    n2 = _near_miss(ctx, two, "moe.combine: a comment", -0.2)
    n3 = _near_miss(ctx, clash, "moe.situ: another comment", -0.4)  # conflicts with #1
    orch = Orchestrator(ctx)

    formed = orch.tick()  # judged nothing, a slot free: the trial is queued, not yet judged
    trial = ctx.ledger.attempt(4)
    assert formed.spawned == [(4, f"trial merge of #{n1} + #{n2}")]
    assert (trial.state, trial.backend, trial.parts, trial.base_sha) == (L.QUEUED, trials.BACKEND, [n1, n2], base)
    assert f"#{n1} moe.situ: a comment: -0.500 ms" in trial.hypothesis
    r = git.Repo(repo)
    assert [p.hexsha for p in r.commit(trial.commit_sha).parents] == [base]  # one commit on main
    changed = set(r.git.diff("--name-only", base, trial.commit_sha).split())
    assert changed == {SITU, COMBINE_EDIT[0]}
    assert gates.calls == []

    judged = orch.tick(spawn=False)  # judged like any attempt
    assert [c[:2] for c in judged.collected] == [(4, L.MERGED)]
    trial = ctx.ledger.attempt(4)
    assert ctx.repo.main_sha() == trial.commit_sha and gates.calls[0] == ("test", trial.commit_sha, base)
    assert EDIT[2] in r.git.show(f"main:{SITU}")  # both parts' edits are on main now
    assert COMBINE_EDIT[2] in r.git.show(f"main:{COMBINE_EDIT[0]}")
    md = markdown(ctx.ledger.attempts(), ctx.ledger.phases(), scores=ctx.ledger.scores())
    assert f"trial merge of #{n1} + #{n2}" in md and "merged" in md
    # the parts are combined once: #3 (left out) has no partner now, so no second trial
    assert orch.trial_merge(None, formed) is None
    assert ctx.ledger.attempt(n3).state == L.ABANDONED and len(ctx.ledger.attempts()) == 4


def test_a_tick_that_judged_forms_a_trial_once_a_full_set_of_near_misses_waits(tmp_path, monkeypatch):
    """The replay backend's every tick judges something: near-misses are still combined, once
    loop.trial_merge_parts (3) of them wait, not before. Each tick here judges a queued commit
    that ends within noise (2 % faster: the cpu profile's noise floor is 10 %)."""
    repo = make_repo(tmp_path, {"loop.concurrency": 1})
    fake_profile(repo, ["moe.situ"])
    one = candidate(repo, "one", [EDIT])
    two = candidate(repo, "two", [COMBINE_EDIT])
    clash = candidate(repo, "clash", [(SITU, "def moe_situ(", "# another comment\ndef moe_situ(")])
    gates = Gates(monkeypatch)

    def near_miss_bench(req, progress=print, stores=None):
        gates.calls.append(("bench", req.rev, req.base))
        return faster(req.machine, req.scorer, speedup=0.02)

    monkeypatch.setattr("gates.scorer.run_bench", near_miss_bench)
    ctx, settings = context(repo)
    n1 = _near_miss(ctx, one, "moe.situ: a comment", -0.5)
    n2 = queued(ctx, two, "moe.combine: a comment")
    orch = Orchestrator(ctx)

    first = orch.tick(spawn=True)  # judges #2 within noise: two near-misses wait, no trial
    assert [c[:2] for c in first.collected] == [(n2, L.ABANDONED)]
    assert ctx.ledger.attempt(n2).reason == L.WITHIN_NOISE
    assert not any(title.startswith("trial merge") for _, title in first.spawned), first.spawned
    for n, _ in first.spawned:  # the agent this tick briefed: out of the way
        ctx.ledger.transition(n, L.INTERRUPTED, reason="this test's")
    n3 = queued(ctx, clash, "moe.situ: another comment")

    second = orch.tick(spawn=True)  # judges #n3 within noise: the third near-miss
    assert [c[:2] for c in second.collected] == [(n3, L.ABANDONED)]
    (number, title), = [s for s in second.spawned if s[1].startswith("trial merge")]
    # the largest gains first: #n2 and #n3 (2 % of the step) before #n1 (0.5 ms), which
    # clashes with #n3 and is left out
    assert ctx.ledger.attempt(n3).delta_ms < ctx.ledger.attempt(n1).delta_ms
    assert title == f"trial merge of #{n2} + #{n3}"
    assert ctx.ledger.attempt(number).parts == [n2, n3]


def test_trial_merge_keys_are_validated():
    import yaml

    from harness.settings import validate
    from tests.gates.candidates import ROOT

    cfg = yaml.safe_load((ROOT / "kern.yaml").read_text())
    assert (cfg["loop"]["trial_merge_parts"], cfg["loop"]["trial_merge_recent"]) == (3, 12)
    cfg["loop"].update(trial_merge_parts=1, trial_merge_recent=0)
    problems = validate(cfg)
    assert "loop.trial_merge_parts: expected 0 (no trial merges) or at least 2 parts, found 1" in problems
    assert "loop.trial_merge_recent: expected an integer >= 2, found 0" in problems
