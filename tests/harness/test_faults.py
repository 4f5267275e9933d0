"""Faults the loop must survive, each ending in a recorded state with a reason (CPU).

The point here is the orchestrator's bookkeeping, so the gates are stand-ins at the shell
boundary (``gates.accuracy.run_test``, ``gates.scorer.run_bench``) whose A/B goes through the
scorer's real analysis; what a candidate does to a real side is tested in tests/gates. Agents
are real processes (the command backend running a shell script). The orchestrator is killed by
SIGKILL at every step of the pipeline (``KERN_FAULT`` in a forked child) and resumed here: no
row lost, nothing merged twice. A full disk is simulated where the loop writes: artifacts
(ENOSPC) and the ledger (SQLite's SQLITE_FULL through ``max_page_count``).
"""
from __future__ import annotations

import errno
import json
import os
import signal
import time
import traceback
from pathlib import Path

import git
import pytest

from gates.rules.scope import ScopeResult
from gates.scorer import analyse
from gates.settings import MachineProfile, ScorerSettings
from harness import cli, faults
from harness import ledger as L
from harness.agents.base import Proposal, ProposalError, parse_proposal
from harness.orchestrator import Orchestrator, attempt_dir, failure_reason
from harness.pipeline import decide_outcome, merged_unrecorded, phase_definition, try_commit
from harness.processes import acquire_loop_lock, agent_pid, alive
from tests.gates.candidates import candidate, context, make_repo

SITU = "kernels/k31/moe/situ.py"
EDIT = (SITU, "def moe_situ(", "# a comment that changes no instruction\ndef moe_situ(")
COMBINE_EDIT = ("kernels/k31/moe/combine.py", "def moe_combine(", "# a comment\ndef moe_combine(")
PIPELINE = [s for s in faults.STEPS if s != "spawn"]


# --------------------------------------------------------------------------- stand-ins
def faster(machine: MachineProfile, scorer: ScorerSettings, speedup: float = 0.12) -> dict:
    """A kern bench result: B ``speedup`` faster than A at every bucket, no noise, analysed by
    the scorer's own statistics on its settings (so the decision is the real one: the cpu
    profile's noise floor is 10 %, a gain beyond 15 % would be re-measured)."""
    buckets, weights = list(machine.buckets), list(machine.weights)

    def visit(f):
        return {b: [10.0 * b * f] * 3 for b in buckets}

    blocks = {"A": [visit(1.0), visit(1.0)], "B": [visit(1 - speedup), visit(1 - speedup)]}
    samples = {k: {b: [x for v in blocks[k] for x in v[b]] for b in buckets} for k in blocks}
    checks = {k: [{"bucket": b, "unwritten_or_invalid": 0, "nonfinite": 0, "repeated_outputs": 0}
                  for b in buckets] for k in blocks}
    verify = {"verify": {k: {b: {"equal": True} for b in buckets} for k in blocks}}
    return {"outcome": "ok", "buckets": buckets,
            "analysis": analyse(samples, blocks, checks, verify, scorer, buckets, weights)}


class Gates:
    """kern test and kern bench stand-ins: PASS, then B 12 % faster. Every call is recorded as
    (gate, rev, base); ``on_bench`` runs inside the scorer (a person acting meanwhile)."""

    def __init__(self, monkeypatch, on_bench=None, reasons=("400 op calls bit-identical",)):
        self.calls, self.on_bench, self.reasons = [], on_bench, list(reasons)
        monkeypatch.setattr("gates.accuracy.run_test", self.run_test)
        monkeypatch.setattr("gates.scorer.run_bench", self.run_bench)

    def run_test(self, req, progress=None, recording=None):
        self.calls.append(("test", req.rev, req.base))
        return {"verdict": "PASS bit-identical", "reasons": self.reasons,
                "evidence": {"outcome_a": "ok", "outcome_b": "ok"}}

    def run_bench(self, req, progress=print, stores=None):
        self.calls.append(("bench", req.rev, req.base))
        if self.on_bench:
            self.on_bench(req)
        return faster(req.machine, req.scorer)


def killed_at(step: str, work) -> None:
    """Run ``work()`` in a forked child with KERN_FAULT=step; it must die there by SIGKILL."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.environ[faults.VARIABLE] = step
            work()
        except BaseException:  # noqa: BLE001 - reported through the exit status
            traceback.print_exc()
            code = 2
        os._exit(code)  # reached only when the fault point did not fire
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, \
        f"KERN_FAULT={step}: the child ended with status {os.waitstatus_to_exitcode(status)}, " \
        f"not SIGKILL at that step"


def fake_profile(repo: Path, ops: list[str]) -> None:
    """main's profile, as the planner reads it (so no step runs): ``ops`` in priority order."""
    from harness.orchestrator import profile_path, profile_spec
    from harness.settings import load

    sha = git.Repo(repo).head.commit.hexsha
    import torch

    settings, cuda = load(repo / "kern.yaml"), torch.cuda.is_available()  # as context() picks it
    cfg = settings.resolve(cuda)
    path = profile_path(repo / "runs", sha, profile_spec(cfg.target, cfg.machine, cuda), cuda)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = {name: {"ms": 10.0 - i, "floor_ms": 0.5, "free_ms": None} for i, name in enumerate(ops)}
    path.write_text(json.dumps({"profile": {"rows": 4, "step_ms": 60.0, "ops": rows}}))


def queued(ctx, sha: str, title: str) -> int:
    """An attempt queued with its commit, as a restarted loop finds one."""
    base = ctx.repo.git.git.merge_base(ctx.repo.main_sha(), sha)
    phase = ctx.ledger.phase(phase_definition(ctx))
    n = ctx.ledger.new_attempt(title=title, hypothesis="", target="moe.situ", backend="manual",
                               base_sha=base, phase_id=phase)
    ctx.ledger.transition(n, L.JUDGING, commit_sha=sha)
    ctx.ledger.transition(n, L.QUEUED, reason="re-queued after a restart")
    return n


def merges(ctx, number: int) -> int:
    return sum(1 for e in ctx.ledger.events(number) if e.kind == "transition" and e.data["to"] == L.MERGED)


def run_loop_tick(repo: Path) -> int:
    return cli.main(["--repo", str(repo), "loop", "--tick", "--no-live"])


# --------------------------------------------------------------------------- the orchestrator killed
@pytest.mark.parametrize("step", PIPELINE)
def test_killed_at_every_step_resumes_with_no_lost_row_and_one_merge(step, tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    base = git.Repo(repo).head.commit.hexsha
    sha = candidate(repo, "cand", [EDIT])
    gates = Gates(monkeypatch)
    killed_at(step, lambda: try_commit(context(repo)[0], "cand"))

    ctx, settings = context(repo)
    (a,) = ctx.ledger.attempts()
    after_merge = PIPELINE.index(step) > PIPELINE.index("merge")
    assert a.state == (L.MERGED if step == "notes" else L.JUDGING), a
    assert ctx.repo.main_sha() == (sha if after_merge else base)
    assert ctx.repo.note(sha) is None
    orch = Orchestrator(ctx)
    done = orch.resume()
    if PIPELINE.index(step) < PIPELINE.index("merge"):
        # a kern try's attempt whose process died before its decision reached the ledger: the
        # loop records it as interrupted and never judges it itself (issue 38); the user's
        # `kern try --again` judges it as a new attempt, which merges once
        assert (done.interrupted, done.requeued, done.notes) == ([a.number], [], [a.number])
        (a,) = ctx.ledger.attempts()
        assert a.state == L.INTERRUPTED and "--again" in a.reason
        number, out = try_commit(ctx, "cand")
        assert out.state == L.MERGED and number == a.number + 1 and ctx.repo.main_sha() == sha
        assert merges(ctx, a.number) == 0 and merges(ctx, number) == 1
        assert gates.calls == [("test", sha, base), ("bench", sha, base)]
        return
    assert done.requeued == ([] if step == "notes" else [a.number])
    assert done.notes == ([a.number] if step == "notes" else [])
    orch.tick(spawn=False)

    (a,) = ctx.ledger.attempts()
    assert (a.state, a.commit_sha, ctx.repo.main_sha()) == (L.MERGED, sha, sha)
    # the decision's evidence survives a kill between the merge and its record
    assert a.delta_ms < 0 and a.medians_b and a.gate.accuracy.verdict == "PASS bit-identical"
    assert merges(ctx, a.number) == 1
    assert [s.sha for s in ctx.ledger.scores()] == [base, sha]  # main before and after, once each
    assert json.loads(ctx.repo.note(sha))["state"] == L.MERGED
    # judged again only when the kill came before main moved
    assert gates.calls == ([] if after_merge else [("test", sha, base), ("bench", sha, base)])
    assert ctx.ledger.integrity() == "ok"


def test_killed_while_starting_an_agent_the_attempt_is_recorded_on_resume(tmp_path):
    repo = make_repo(tmp_path, {"loop.concurrency": 1})
    fake_profile(repo, ["moe.situ"])

    def tick():
        ctx, settings = context(repo)
        Orchestrator(ctx).tick()

    killed_at("spawn", tick)
    ctx, settings = context(repo)
    (a,) = ctx.ledger.attempts()
    d, wt = attempt_dir(ctx.runs, a.number), ctx.repo.worktree_for(a.number, ctx.runs)
    assert (a.state, a.commit_sha) == (L.QUEUED, None)
    assert (d / "brief.json").exists() and not (d / "agent.pid").exists() and wt.exists()
    done = Orchestrator(ctx).resume()
    a = ctx.ledger.attempt(a.number)
    assert done.stranded == [a.number] and done.requeued == []
    assert a.state == L.CRASHED and "before this attempt's agent started" in a.reason
    assert not wt.exists() and ctx.ledger.in_flight() == []


def test_fault_point_is_inert_unless_its_step_is_named(monkeypatch):
    monkeypatch.delenv(faults.VARIABLE, raising=False)
    for step in faults.STEPS:
        faults.point(step)  # still alive
    monkeypatch.setenv(faults.VARIABLE, "notes")
    faults.point("merge")  # another step: still alive
    monkeypatch.setenv(faults.VARIABLE, "mergeing")
    with pytest.raises(ValueError, match="expected one of spawn, scope, test"):
        faults.point("merge")
    assert faults.without({"PATH": "/bin", faults.VARIABLE: "merge"}) == {"PATH": "/bin"}


def test_a_tip_already_on_main_is_a_merge_only_when_the_ledger_decided_it():
    a = L.Attempt(number=1, commit_sha="c" * 40, decision="merge")
    assert merged_unrecorded(a, "c" * 40, merge_base="c" * 40)
    assert not merged_unrecorded(a, "c" * 40, merge_base="b" * 40)  # not on main
    # an agent that never committed: its tip is the base, on main, but nothing was decided
    assert not merged_unrecorded(L.Attempt(number=1, commit_sha="c" * 40), "c" * 40, "c" * 40)
    assert not merged_unrecorded(a, "d" * 40, merge_base="d" * 40)  # rebased since the decision


# --------------------------------------------------------------------------- agents misbehaving
AGENT = r"""
case "$KERN_ATTEMPT" in
  1) kill -STOP $PPID ;;  # hangs: its process frozen, it never answers
  2) kill -KILL $PPID ;;  # crashes before answering
  3) printf '{"kind": "commit", "message": ' > ../../attempts/3/proposal.json; kill -KILL $PPID ;;
  4) echo "extra: 1" >> kern.yaml; echo note > notes.txt; git add -A; git commit -qm "loosen the gate" ;;
  5) echo "# a" >> kernels/k31/moe/situ.py; git commit -qam one
     echo "# b" >> kernels/k31/moe/situ.py; git commit -qam two ;;
  6) printf '{"kind": "commit", "message": "moe.situ: faster"}' > ../../attempts/6/proposal.json
     kill -KILL $PPID ;;  # claims a commit it never made
  7) printf '{"kind": "failed", "timed_out": true, "reason": "agent command timed out after 2s"}' \
       > ../../attempts/7/proposal.json; kill -KILL $PPID ;;  # its backend's own limit ended it
esac
"""


@pytest.mark.slow
def test_agents_that_hang_crash_babble_or_break_the_rules_are_recorded(tmp_path, monkeypatch):
    script = tmp_path / "agent.sh"
    script.write_text(AGENT)
    repo = make_repo(tmp_path, {"agent.backend": "command", "agent.command": f"exec sh {script}",
                                "agent.timeout_s": 3, "loop.concurrency": 7})
    fake_profile(repo, [f"op.{c}" for c in "abcdefg"])
    base = git.Repo(repo).head.commit.hexsha
    gates = Gates(monkeypatch)
    ctx, settings = context(repo)
    orch = Orchestrator(ctx)
    assert [n for n, _ in orch.tick().spawned] == [1, 2, 3, 4, 5, 6, 7]
    orch.wait_agents([2, 3, 4, 5, 6, 7], 60)
    hung = agent_pid(attempt_dir(ctx.runs, 1))
    # past agent.timeout_s as the orchestrator counts it (from the agent's pid file), however
    # long the spawning took; until then attempt 1 holds 2-7 back (the order contract)
    started = (attempt_dir(ctx.runs, 1) / "agent.pid").stat().st_mtime
    time.sleep(max(0.0, 3.5 - (time.time() - started)))
    orch.tick(spawn=False)

    got = {a.number: a for a in ctx.ledger.attempts()}
    assert (got[1].state, got[1].reason) == (L.TIMED_OUT, "agent ran past 3s")
    assert not alive(hung)
    assert got[2].state == L.CRASHED and got[2].reason.startswith("agent process ended without a proposal")
    assert got[3].state == L.CRASHED and "agent returned garbage" in got[3].reason \
        and "expected a JSON object" in got[3].reason
    for n in (4, 5, 6):
        assert (got[n].state, got[n].reason) == (L.ABANDONED, L.SCOPE), got[n]
    assert (got[7].state, got[7].reason) == (L.TIMED_OUT, "agent failed: agent command timed out after 2s")
    assert got[4].gate.scope_problems == ("kern.yaml is protected", "notes.txt is outside the "
                                          "editable globs ['kernels/k31/**']")
    assert got[5].gate.scope_problems == ("2 commits: an attempt must be exactly one commit",)
    assert got[6].gate.scope_problems == ("no commit: the agent finished without committing",)
    assert gates.calls == [] and ctx.repo.main_sha() == base and ctx.repo.note(base) is None
    assert ctx.ledger.in_flight() == []
    assert not [p for p in (ctx.runs / "worktrees").glob("attempt-*") if p.is_dir()]


@pytest.mark.parametrize("text,words", [
    ("", "expected a JSON object, found ''"),
    ('{"kind": "commit", "mess', "expected a JSON object"),
    ("[1, 2]", "found a JSON list"),
    ('{"kind": "banana"}', "kind: expected one of commit, declined, failed, found 'banana'"),
    ('{"kind": "commit", "message": 3}', "message: expected str, found 3"),
    ('{"kind": "declined", "estimate_ms": "fast"}', "estimate_ms: expected int or float or NoneType"),
    ('{"kind": "commit", "tokens_in": true}', "tokens_in: expected int, found True"),
    ('{"kind": "commit", "cost_usd": -1}', "cost_usd: expected a count >= 0, found -1"),
    ('{"kind": "commit", "patch": "..."}', "found unknown patch"),
])
def test_garbage_proposals_are_refused_with_what_was_expected(text, words):
    with pytest.raises(ProposalError) as e:
        parse_proposal(text)
    assert words in str(e.value)


def test_a_well_formed_proposal_parses_back():
    p = Proposal(kind="declined", message="split K", estimate_ms=-0.4, tokens_in=3, cost_usd=0.5)
    assert parse_proposal(json.dumps(p.as_dict())) == p


# --------------------------------------------------------------------------- candidates' sides
def _test_result(outcome_a="ok", outcome_b="ok", verdict="FAIL"):
    return {"verdict": verdict, "reasons": [f"candidate side ended: {outcome_b}"],
            "evidence": {"outcome_a": outcome_a, "outcome_b": outcome_b}}


@pytest.mark.parametrize("test,bench,state,reason", [
    (_test_result(outcome_b="out of memory"), None, L.CRASHED,
     "kern test: the candidate's side ended with out of memory"),
    (_test_result(outcome_b="crash (signal SIGSEGV)"), None, L.CRASHED,
     "kern test: the candidate's side ended with crash (signal SIGSEGV)"),
    (_test_result(outcome_b="timeout"), None, L.TIMED_OUT, "accuracy gate timeout"),
    (_test_result(outcome_a="error", outcome_b="not run", verdict="INCONCLUSIVE"), None, L.CRASHED,
     "kern test: main's side ended with error"),
    (_test_result(verdict="PASS bit-identical"), {"outcome": "out of memory", "error": "sideB ended"},
     L.CRASHED, "scorer: out of memory"),
    (_test_result(verdict="PASS bit-identical"), {"outcome": "crash (signal SIGSEGV)"}, L.CRASHED,
     "scorer: crash (signal SIGSEGV)"),
    (_test_result(verdict="PASS bit-identical"), {"outcome": "timeout"}, L.TIMED_OUT, "scorer timeout"),
    (_test_result(verdict="FAIL"), None, L.ABANDONED, L.ACCURACY),
])
def test_the_ledger_reason_names_what_ended_a_side(test, bench, state, reason):
    out = decide_outcome(ScopeResult(True), test, bench)
    assert (out.state, out.reason) == (state, reason)


# --------------------------------------------------------------------------- main moved by a person
def test_main_moved_by_a_person_while_judging_is_rebased_and_judged_again(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    r = git.Repo(repo)
    base = r.head.commit.hexsha
    sha = candidate(repo, "cand", [EDIT])

    def person_commits(req):
        if [c[0] for c in gates.calls].count("bench") == 1:  # during the first A/B only
            (repo / "NOTES.md").write_text("a person's note\n")
            r.git.add("NOTES.md")
            r.git.commit("-qm", "a person's commit on main")

    gates = Gates(monkeypatch, on_bench=person_commits)
    ctx, _ = context(repo)
    number, out = try_commit(ctx, "cand")
    a = ctx.ledger.attempt(number)
    person = r.commit("main~1").hexsha
    assert out.state == a.state == L.MERGED and a.base_sha == person
    assert ctx.repo.main_sha() == a.commit_sha != sha
    assert [p.hexsha for p in r.commit(a.commit_sha).parents] == [person]
    assert gates.calls == [("test", sha, base), ("bench", sha, base),
                           ("test", a.commit_sha, person), ("bench", a.commit_sha, person)]
    assert (repo / "NOTES.md").exists() and EDIT[2] in (repo / SITU).read_text()
    assert not ctx.repo.worktree_for(number, ctx.runs).exists()


# --------------------------------------------------------------------------- a full disk
def test_failure_reason_says_disk_full_and_who_acts():
    e = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/r/runs/tap/x/record.spec.json")
    reason, stop = failure_reason("judging", e)
    assert stop and reason.startswith("disk full while judging writing /r/runs/tap/x/record.spec.json")
    assert "the operator must free space on the disk holding runs/" in reason
    assert failure_reason("judging", RuntimeError("gate bug")) == \
        ("judging failed: RuntimeError: gate bug", False)


def test_disk_full_while_writing_a_brief_records_the_attempt_and_stops(tmp_path, monkeypatch):
    repo = make_repo(tmp_path, {"loop.concurrency": 2})
    fake_profile(repo, ["moe.situ", "moe.combine"])
    ctx, settings = context(repo)
    write_text = Path.write_text

    def full(self, *args, **kwargs):
        if "attempts" in self.parts:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    rep = Orchestrator(ctx).tick()
    (a,) = ctx.ledger.attempts()  # the second target was never started
    assert a.state == L.CRASHED and a.reason.startswith("disk full while starting the agent writing ")
    assert a.reason.split(" writing ")[1].startswith(str(attempt_dir(ctx.runs, 1) / "brief.json"))
    assert rep.stop == a.reason and rep.spawned == []
    assert not (attempt_dir(ctx.runs, 1) / "agent.pid").exists()
    assert not ctx.repo.worktree_for(1, ctx.runs).exists()
    assert ctx.ledger.integrity() == "ok"


def test_disk_full_while_judging_requeues_the_attempt_and_stops(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    first, second = candidate(repo, "c1", [EDIT]), candidate(repo, "c2", [COMBINE_EDIT])
    ctx, settings = context(repo)
    n1, n2 = queued(ctx, first, "first"), queued(ctx, second, "second")
    gates = Gates(monkeypatch)
    spec = ctx.runs / "tap" / "x" / "record.spec.json"

    def full(req, progress=None, recording=None):  # where the gate writes its first artifact
        gates.calls.append(("test", req.rev, req.base))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(spec))

    monkeypatch.setattr("gates.accuracy.run_test", full)
    rep = Orchestrator(ctx).tick(spawn=False)
    a1, a2 = ctx.ledger.attempt(n1), ctx.ledger.attempt(n2)
    assert a1.state == L.QUEUED and a1.reason.startswith(f"disk full while judging writing {spec}")
    assert (a2.state, a2.reason) == (L.QUEUED, "re-queued after a restart")  # not touched
    assert rep.stop == a1.reason and len(gates.calls) == 1

    monkeypatch.setattr("gates.accuracy.run_test", gates.run_test)  # the operator freed space
    orch = Orchestrator(ctx)
    orch.resume()
    orch.tick(spawn=False)
    a1, a2 = ctx.ledger.attempt(n1), ctx.ledger.attempt(n2)
    assert (a1.state, a2.state) == (L.MERGED, L.MERGED)
    assert ctx.repo.main_sha() == a2.commit_sha and a2.base_sha == first  # rebased onto the first


def test_ledger_disk_full_stops_the_loop_and_the_next_loop_records_the_merge(tmp_path, monkeypatch,
                                                                              capsys):
    repo = make_repo(tmp_path, {"loop.concurrency": 0})
    sha = candidate(repo, "cand", [EDIT])
    ctx, _ = context(repo)
    n = queued(ctx, sha, "cand")
    ctx.ledger.close()
    # long gate reasons: the final transition's event needs fresh pages, and the disk has none
    gates = Gates(monkeypatch, reasons=[f"fact {i}: " + "x" * 1500 for i in range(6)])
    record_score = L.Ledger.record_score

    def disk_fills_then_record(self, phase, score_sha, *args, **kwargs):
        if score_sha == sha:  # the disk fills as main moves to the candidate (not at main's baseline)
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            self._db.execute(f"PRAGMA max_page_count = {pages}")
        return record_score(self, phase, score_sha, *args, **kwargs)

    monkeypatch.setattr(L.Ledger, "record_score", disk_fills_then_record)
    assert run_loop_tick(repo) == 4
    err = capsys.readouterr().err
    assert "kern loop: stopped: ledger" in err and "the disk is full" in err
    assert "free space on that disk, then start the loop again" in err
    ctx, _ = context(repo)
    a = ctx.ledger.attempt(n)
    assert a.state == L.JUDGING and a.decision == "merge" and a.delta_ms < 0
    assert ctx.repo.main_sha() == sha and ctx.ledger.integrity() == "ok"

    monkeypatch.setattr(L.Ledger, "record_score", record_score)  # the operator freed space
    assert run_loop_tick(repo) == 0
    assert f"re-queued attempts [{n}]" in capsys.readouterr().out
    ctx, _ = context(repo)
    a = ctx.ledger.attempt(n)
    assert a.state == L.MERGED and merges(ctx, n) == 1 and a.delta_ms < 0
    assert [s.sha for s in ctx.ledger.scores()] == [a.base_sha, sha]  # each once
    assert len(gates.calls) == 2  # judged once: the restart found the merge, it did not redo it


# --------------------------------------------------------------------------- one loop per repository
def test_a_second_loop_on_the_same_repository_is_refused(tmp_path, capsys):
    repo = make_repo(tmp_path, {"loop.concurrency": 0})
    holder = acquire_loop_lock(repo / "runs")
    try:
        assert run_loop_tick(repo) == 3
    finally:
        holder.close()
    err = capsys.readouterr().err
    assert f"pid {os.getpid()} on {os.uname().nodename} already runs a loop" in err
    assert run_loop_tick(repo) == 0  # the holder ended: the next loop runs


# --------------------------------------------------------------------------- re-queued on an older main
def test_a_commit_requeued_on_an_older_main_is_rebased_and_judged_against_todays(tmp_path, monkeypatch):
    # 2026-12-05: #11, left judging on main 8339e6e, was judged after a restart against that
    # base under gates whose scorer its base's workload could not serve: the scorer crashed
    repo = make_repo(tmp_path)
    first = candidate(repo, "c1", [EDIT])
    clash = candidate(repo, "c2", [(COMBINE_EDIT[0], COMBINE_EDIT[1], "# clashing\n" + COMBINE_EDIT[1])])
    moved = candidate(repo, "m1", [COMBINE_EDIT])
    git.Repo(repo).git.merge("-q", "--ff-only", moved)  # main moved on after c1 and c2 were made
    ctx, _ = context(repo)
    n1, n2 = queued(ctx, first, "made on the older main"), queued(ctx, clash, "clashes with today's main")
    gates = Gates(monkeypatch)
    rep = Orchestrator(ctx).tick(spawn=False)
    (test, rev, base), *_ = gates.calls
    assert (test, base) == ("test", moved) and rev != first
    assert git.Repo(repo).commit(rev).parents[0].hexsha == moved  # c1's change, on today's main
    a1, a2 = ctx.ledger.attempt(n1), ctx.ledger.attempt(n2)
    assert (a1.state, a1.base_sha) == (L.MERGED, moved) and ctx.repo.main_sha() == rev
    assert (a2.state, a2.reason) == (L.ABANDONED, L.CONFLICT) and a2.gate.conflict
    assert (n2, L.ABANDONED, L.CONFLICT) in rep.collected
    assert all(r != clash for _, r, _ in gates.calls)  # never judged
