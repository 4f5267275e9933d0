"""``kern loop``: ticks that collect finished agents, judge their commits, plan targets from
the latest profile and the journey, render briefs and spawn agents.

State lives in the ledger and in ``runs/attempts/<n>/`` (brief, proposal, agent log), so a
loop killed at any point resumes: an attempt left ``judging`` is re-queued and judged again
(a commit already on main is recorded, never merged twice); an attempt whose agent never
started is recorded as crashed; a git note not yet written is restored; an agent that finished
while no loop ran is collected at the next tick; one still running keeps running.

Order contract. A tick collects and judges the loop's in-flight attempts (agents running,
commits re-queued) strictly in attempt-number order, and never attempt ``n`` while an attempt
with a smaller number is still in flight with its agent running: ``n`` waits for a later tick
(:func:`collectable`). So when ``n`` is judged, every attempt before it is final, and main is
what their outcomes (in number order) made it: which agent process finished first, and how
long any gate took, decide nothing. An agent still running when a tick collects is collected
by a later tick, and every attempt's outcome is the same as if it had finished in time. What
an attempt is judged against is main at its judging, not at its spawn: a commit made on an
older main is rebased and judged again, or ends as a conflict. A hung agent cannot hold the
later attempts back for long: past ``agent.timeout_s`` a tick ends it (timed out) and goes on.
Outside the contract: a person moving main (``kern try``, a push) does so on their own clock.
"""
from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from gates.rules.footprint import DiskShort
from gates.settings import MachineProfile, Target
from gates.summary import GateSummary

from . import faults
from . import ledger as L
from . import planning, trials
from .agents.base import ProposalError, parse_proposal
from .agents.common import AgentConfigError
from .briefs import ceiling_text, make_brief
from .pipeline import Context, gpu_lock, judge_and_record, note_for, phase_definition
from .processes import (agent_pid, agent_started, alive, end_agent, judge_alive, judge_of,
                        start_agent)
from .ray_farm import NodeLost
from .settings import Resolved

@dataclass
class Resumed:
    requeued: list = field(default_factory=list)  # judging -> queued: judged again
    stranded: list = field(default_factory=list)  # queued, agent never started -> crashed
    notes: list = field(default_factory=list)  # final attempts whose git note was restored
    interrupted: list = field(default_factory=list)  # a dead kern try's, judging -> interrupted


@dataclass
class TickReport:
    tick: int
    collected: list = field(default_factory=list)  # (attempt, state, reason)
    spawned: list = field(default_factory=list)  # (attempt, target)
    stop: str | None = None
    draining: str | None = None  # a budget is spent: no attempt starts, those in flight finish


AGENT_START_FAILED = "starting the agent"  # failure_reason's words for an agent never started
STRANDED = "the loop stopped before this attempt's agent started"  # resume's, for the same


def agent_never_proposed(a: L.Attempt) -> bool:
    """Pure: whether attempt ``a`` crashed before its agent could propose (never started, its
    start failed, or its process died): what it was handed (a replay patch) was never used."""
    return a.state == L.CRASHED and (a.reason or "").startswith(
        (L.AGENT_DIED, STRANDED, *failure_starts(AGENT_START_FAILED)))


def failure_starts(doing: str) -> tuple[str, str]:
    """Pure: how :func:`failure_reason`'s reasons for ``doing`` begin (a full disk, any other
    failure); a :class:`DiskShort`'s own words are not among them."""
    return f"disk full while {doing}", f"{doing} failed"


def failure_reason(doing: str, e: BaseException) -> tuple[str, bool]:
    """Pure: (the reason the ledger records, whether the loop must stop). A full disk stops
    the loop: every later attempt would fail the same way and be lost for nothing."""
    full, failed = failure_starts(doing)
    if isinstance(e, DiskShort):  # no room for a judgment, or a side ran out: says where
        return str(e)[:600], True
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        where = f" writing {e.filename}" if e.filename else ""
        return (f"{full}{where} (no space left on device): the operator must "
                f"free space on the disk holding runs/, then start kern loop again", True)
    return f"{failed}: {type(e).__name__}: {e}"[:300], False


def collectable(in_flight: dict[int, bool]) -> list[int]:
    """Pure: the attempts a tick collects now, in the order it judges them.

    ``in_flight`` maps each in-flight attempt's number to whether it is ready (its agent has
    ended: a proposal written, the process gone, or past its time limit; or its commit was
    re-queued). The answer is the ready attempts in number order up to the first one not
    ready, so no attempt is judged while one before it may still change main."""
    ready = []
    for n in sorted(in_flight):
        if not in_flight[n]:
            break
        ready.append(n)
    return ready


def attempt_dir(runs: Path, number: int) -> Path:
    return runs / "attempts" / str(number)


def agent_last_line(log: Path) -> str:
    """The last non-empty line of an agent's log ('' when there is none to read)."""
    from gates.results import last_lines

    from .agents.common import read_tail

    try:
        tail = read_tail(log, 2048)
    except OSError:
        return ""
    return (last_lines(tail, 1) or ("",))[0]


class Orchestrator:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.led = ctx.ledger
        self.run_id = None
        self.idle_ticks = 0
        self.started = time.monotonic()
        self.halt: str | None = None  # why the loop must stop now (a full disk)
        self.out_of_time: str | None = None  # why no judgment starts: the wall budget is too short
        # this loop's judgments' wall seconds less main's compile (the next may take as long), the
        # seconds main's compile took, and the mains compiled: a new main (a merge) compiles again
        self.judged_s: list[float] = []
        self.compile_main_s: list[float] = []
        self.compiled_mains: set[str] = set()
        self.agent_crashes = 0  # agents in a row that ended without a proposal
        self.judged = 0  # attempts the last collect judged
        self.ceiling = ""  # what the latest profile's floors divide by (briefs say it)

    # ------------------------------------------------------------ resume
    def resume(self) -> Resumed:
        """What a killed loop left behind: attempts judging are re-queued (judged again; a
        commit already on main is recorded, never merged twice), except a ``kern try``'s: left
        alone while its process runs, else recorded as interrupted (the user asked for that
        judgment; ``kern try --again`` repeats it, a loop does not), attempts queued whose agent
        never started are recorded as crashed, and final attempts whose git note was not yet
        written get it."""
        done = Resumed()
        for a in self.led.attempts(states=[L.JUDGING]):
            d = attempt_dir(self.ctx.runs, a.number)
            if judge_of(d) is not None:  # a kern try's (its pid file), not the loop's
                if judge_alive(d) is not False:
                    continue  # still judged by its kern try (or on another host): not ours
                if a.decision != "merge":  # a recorded merge decision is finished, not judged again
                    self.led.transition(a.number, L.INTERRUPTED, reason=(
                        f"its kern try stopped while judging (found by a loop's resume); `kern try "
                        f"{(a.commit_sha or '')[:12]} --again` judges it again"))
                    done.interrupted.append(a.number)
                    continue
            self.led.transition(a.number, L.QUEUED, reason="re-queued after a restart")
            done.requeued.append(a.number)
        for a in self.led.attempts(states=[L.QUEUED]):
            if not a.commit_sha:  # the loop died between creating the attempt and its agent
                self.led.transition(a.number, L.CRASHED, reason=f"{STRANDED}; nothing was judged")
                self.ctx.repo.close_attempt(a.number, self.ctx.runs)
                done.stranded.append(a.number)
        noted = self.ctx.repo.noted()
        for a in self.led.attempts(states=L.FINAL):
            if a.commit_sha and a.commit_sha != a.base_sha and a.commit_sha not in noted:
                try:
                    self.ctx.repo.add_note(a.commit_sha, note_for(a))
                except Exception as e:  # noqa: BLE001 - a commit gc'd since: evidence lost, not state
                    self.ctx.progress(f"attempt #{a.number}: note not restored: {e}")
                    continue
                noted.add(a.commit_sha)
                done.notes.append(a.number)
        return done

    @property
    def cfg(self) -> Resolved:
        """kern.yaml resolved for this machine (the context's)."""
        return self.ctx.cfg

    # ------------------------------------------------------------ collect + judge
    def collect(self, report: TickReport) -> None:
        """Collect and judge what :func:`collectable` allows, in number order (the module's
        order contract); attempts after the first one still running wait for a later tick."""
        # the backends' own limit (the command backend's default too): past it the agent
        # process is hung, whatever it is doing
        limit = self.cfg.agent.timeout_s
        # the loop's own in-flight attempts: agents running, and commits re-queued after a
        # restart or a full disk. A queued attempt without a commit is resume()'s to record.
        waiting = {a.number: a for a in self.led.attempts(states=[L.RUNNING])}
        waiting.update({a.number: a for a in self.led.attempts(states=[L.QUEUED]) if a.commit_sha})
        now = time.time()
        ready = {n: a.state == L.QUEUED or self._agent_ended(n, limit, now) for n, a in waiting.items()}
        jobs = []  # (attempt, commit, base) to judge, in number order
        for n in collectable(ready):
            if self.halt:
                break
            a = waiting[n]
            if a.state == L.QUEUED:  # re-queued after a restart: judged again (judging from its start)
                job = self._requeued_job(a, report)
                if job is not None:
                    jobs.append(job)
            else:
                tip = self._collect_agent(a, limit, report)
                if tip is not None:
                    jobs.append((n, tip, a.base_sha, False))
        self.judged = len(jobs)
        self._judge_all(jobs, report)

    def _requeued_job(self, a, report: TickReport) -> tuple | None:
        """The job of a commit re-queued by a restart, judged against today's main: one made
        on an older main is rebased onto it first, since its old base may not run under the gates
        of today (2026-12-05: #11's base 8339e6e, judged after the scorer's workload gained
        timed inputs, crashed its scorer), and a win there would be rebased and judged again
        anyway. A commit main already holds is judged as it is (recorded, never merged twice);
        one that does not rebase ends abandoned as a conflict. None: nothing to judge."""
        from . import progress as P

        repo = self.ctx.repo
        main = repo.main_sha()
        if a.base_sha == main or repo.is_ancestor(a.commit_sha, main):
            return a.number, a.commit_sha, a.base_sha, True
        ok, tip = repo.rebase(a.number, main, self.ctx.runs, tip=a.commit_sha)
        if not ok:
            self.led.transition(a.number, L.ABANDONED, reason=L.CONFLICT,
                                gate=GateSummary(conflict=tip))
            report.collected.append((a.number, L.ABANDONED, L.CONFLICT))
            self.ctx.repo.close_attempt(a.number, self.ctx.runs)
            return None
        self.ctx.progress(P.Rebased(a.number, main))
        return a.number, tip, main, True

    def _judge_all(self, jobs: list, report: TickReport) -> None:
        """Judge ``jobs`` and apply their outcomes in number order. With more than one judging
        slot up to that many run at once, one per slot (:func:`farm.judging_width`); each
        is against the base its commit was made on, which no earlier outcome changes, so
        judging them together decides nothing differently: the outcomes are still applied one
        by one in number order, and an attempt that wins after main moved is rebased and judged
        again against the new main, as when judged alone."""
        from concurrent.futures import ThreadPoolExecutor

        from . import farm
        from .pipeline import draw_hidden, judgment

        if self._stopping():  # none starts: each waits, queued, for the next loop
            for n, _, _, queued in jobs:
                self._unjudged(n, queued, report)
            return
        if self.ctx.remote is not None:  # Ray: every judgment a task now; Ray runs them as slots free
            futures = {}
            for n, tip, base, queued in jobs:
                if queued:
                    self.led.transition(n, L.JUDGING)
                futures[n] = self.ctx.remote.submit(self.ctx, tip, base, draw_hidden(self.ctx),
                                                    f"{n}-{tip[:10]}")
            for n, tip, base, _ in jobs:
                if self.halt:
                    self._unjudged(n, False, report)
                    continue
                self._judge(n, tip, base, report, first=futures[n])
            return
        width = farm.judging_width(len(jobs), len(self.ctx.slots()))
        if width <= 1:
            self._judge_in_batches(jobs, report)
            return
        with ThreadPoolExecutor(width, thread_name_prefix="judging") as pool:
            # each worker holds a slot while it judges; the rest wait for one in number order
            futures = {}
            for n, tip, base, queued in jobs:
                if queued:
                    self.led.transition(n, L.JUDGING)
                futures[n] = pool.submit(judgment, self.ctx, tip, base, draw_hidden(self.ctx))
            for n, tip, base, _ in jobs:
                if self.halt:
                    futures[n].cancel()
                    self._unjudged(n, False, report)
                    continue
                self._judge(n, tip, base, report, first=futures[n].result)

    def _judge_in_batches(self, jobs: list, report: TickReport) -> None:
        """One slot: ``jobs`` judged one after another in number order, and main recorded once
        per batch (gates/rules/batch.py): consecutive jobs against one main and recording shape
        share one hidden draw, made after every job's commit was fixed (collected), and
        one recording of main (``gates.accuracy.MainRecording``), kept until the batch's last
        verdict or a merge; the draw reaches the ledger rows then. A merge ends the batch: the
        members after it are judged on a new draw and a new recording. A batch of one is judged
        as ``kern try`` judges (the gates draw its inputs, unless it was prepared early).
        While a judgment is in its scorer the next one is prepared (gates/rules/overlap.py:
        the next member, or the next batch's first with that batch's draw, :class:`Ahead`)."""
        from gates.rules import batch as B

        from .pipeline import judgment

        by_n = {n: (tip, base, queued) for n, tip, base, queued in jobs}
        todo = B.plan([B.Frozen(n, tip, base, self._shape(n, tip, base)) for n, tip, base, _ in jobs],
                      share=self._share_draws())
        carried = mine = None  # (number, hidden, EarlySides): the next batch's first member, prepared
        try:
            while todo:
                b = todo.pop(0)
                following = todo[0] if todo else None
                if mine is not None:  # the last batch's (used, or the loop stopped): ended
                    mine[2].close()
                mine, carried = (carried, None) if carried and carried[0] == b.members[0] else (None, carried)
                if carried is not None:  # prepared for another job (a bug): ended, never used
                    carried[2].close()
                    carried = None
                if len(b.members) == 1:
                    n = b.members[0]
                    tip, base, queued = by_n[n]
                    if self._stopping():  # (what was prepared for it is ended below)
                        self._unjudged(n, queued, report)
                        continue
                    if queued:
                        self.led.transition(n, L.JUDGING)
                    ahead = self._ahead(n, b.members, following, by_n, None, None)
                    hidden, early = (mine[1], mine[2]) if mine is not None else (None, None)
                    try:
                        # as judge_once judges it (the gates draw; or its batch's draw, made early)
                        out = self._judge(n, tip, base, report, first=lambda tip=tip, base=base: judgment(
                            self.ctx, tip, base, hidden, early=early, watch=ahead))
                    finally:
                        if early is not None:
                            early.close()
                        if ahead is not None:  # what it started, whatever ended the judgment
                            carried = (ahead.next.number, ahead.hidden, ahead.prepared())
                            carried = carried if carried[2] is not None else None
                    carried = self._carry(ahead, carried, out)
                    continue
                state, carried = self._judge_batch(b, by_n, report, mine, following)
                left = B.rest(state)
                if left is not None:  # a merge ended it: the rest on a draw and recording of their own
                    todo.insert(0, left)
                for n in state.pending if left is None else ():  # the loop stopped inside the batch
                    self._unjudged(n, by_n[n][2], report)
        finally:  # the loop stopped before the job it was prepared for, or raised: ended
            for p in (mine, carried):  # (closing what a gate used only lets its holds go)
                if p is not None:
                    p[2].close()

    def _ahead(self, n: int, pending: tuple, following, by_n: dict, hidden, recording):
        """What prepares the judgment after ``n`` (``pending``: its batch's members left, it
        first; ``following``: the next batch) while ``n``'s scorer runs: an :class:`Ahead`, or
        None when ``n`` is the last job or kern.yaml's ``test.start_beside_scorer`` is off. The
        next batch's first member gets its batch's draw
        there (every job froze when collected: ``batch.draw_due``)."""
        from gates.rules import batch as B
        from gates.rules import overlap

        if not self.cfg.test.start_beside_scorer:  # kern.yaml: the next starts after this one
            return None
        nxt = overlap.next_judged(tuple(pending), following.members if following else None)
        if nxt is None:
            return None
        tip, base, _ = by_n[nxt.number]
        if nxt.same_batch:
            return Ahead(self.ctx, n, nxt, tip, base, hidden, recording)
        if not B.draw_due(following, by_n):  # every job's commit is fixed before the tick judges
            raise RuntimeError(f"batch {list(following.members)}: a member is not frozen (a bug of the tick)")
        return Ahead(self.ctx, n, nxt, tip, base, None, None)

    def _carry(self, ahead, prepared, out):
        """After a judgment (``out``; None: it failed): ``prepared``, what ``ahead`` started for
        the next batch's first member (``(number, hidden, EarlySides)``), when it may run on it
        (``overlap.keep_prepared``); else None, ended. Its draw goes with its sides: the next
        batch draws again at its start, as when nothing was prepared."""
        from gates.rules import overlap

        if prepared is None:
            return None
        early = prepared[2]
        merged = out is not None and out.state == L.MERGED
        keep, why = overlap.keep_prepared(overlap.EndFacts(
            halted=bool(self._stopping()), failed=out is None, merged=merged, batch_member=False,
            main_side_serves=False), early.sides)
        if not keep:
            early.close()
            self.ctx.progress(f"#{ahead.next.number}: its sides started early are ended: {why}")
            return None
        return prepared

    def _judge_batch(self, b, by_n: dict, report: TickReport, prepared=None, following=None):
        """The members of batch ``b`` on one draw and one recording of main (in number order,
        up to a merge or the loop's stop); the draw written into their rows once it is settled.
        ``prepared``: its first member's ``(number, hidden, EarlySides)``, made beside the
        judgment before it (the batch's draw is that hidden); ``following``: the next batch,
        whose first member is prepared beside this batch's last member's scorer. Returns the
        batch's final ``BatchState`` and what was prepared for the next batch (or None)."""
        from gates.accuracy import MainRecording
        from gates.rules import batch as B
        from gates.rules import overlap

        from .pipeline import draw_hidden, judgment

        if not B.draw_due(b, by_n):  # every job's commit is fixed before the tick judges
            raise RuntimeError(f"batch {list(b.members)}: a member is not frozen (a bug of the tick)")
        # after the last member froze: here, or as its first member was prepared (_ahead)
        hidden = prepared[1] if prepared is not None else draw_hidden(self.ctx)
        recording = MainRecording(hidden, self.ctx.runs)
        state, held = B.BatchState(b), {}
        early = prepared[2] if prepared is not None else None  # the next member's tap sides
        carried = None  # the next batch's first member's, prepared beside the last member's scorer
        try:
            while (n := B.next_member(state)) is not None and not self._stopping():
                tip, base, queued = by_n[n]
                if queued:
                    self.led.transition(n, L.JUDGING)
                ahead = self._ahead(n, state.pending, following, by_n, hidden, recording)
                try:
                    out = self._judge(n, tip, base, report, hold_hidden=True,
                                      first=lambda tip=tip, base=base, early=early, ahead=ahead: judgment(
                                          self.ctx, tip, base, hidden, recording, early=early, watch=ahead))
                finally:
                    if early is not None:  # used, or not: its processes and holds go
                        early.close()
                    early = None
                    if ahead is not None:  # what it started, whatever ended the judgment
                        early = ahead.prepared()
                        if not ahead.next.same_batch:
                            carried = (ahead.next.number, ahead.hidden, early) if early is not None else None
                            early = None
                merged = out is not None and out.state == L.MERGED
                if ahead is not None and not ahead.next.same_batch:
                    carried = self._carry(ahead, carried, out)
                elif early is not None:
                    keep, why = overlap.keep_prepared(overlap.EndFacts(
                        halted=bool(self._stopping()), failed=out is None, merged=merged, batch_member=True,
                        main_side_serves=recording.keeper is not None), early.sides)
                    if not keep:
                        early.close()
                        self.ctx.progress(f"#{ahead.next.number}: its sides started early are ended: {why}")
                        early = None
                if out is not None and out.held_hidden is not None:
                    held[n] = out.held_hidden
                state = B.judged(state, n, merged=merged)
        except BaseException:
            for e in (early, carried[2] if carried is not None else None):
                if e is not None:
                    e.close()
            recording.close(0.0, kill=True)
            raise
        if early is not None:  # the loop stopped before the member it was prepared for
            early.close()
        try:
            recording.close(self.cfg.test.timeout_s)
        except Exception as e:  # noqa: BLE001 - every verdict is made: main's side's end decides none
            self.ctx.progress(f"batch {list(b.members)}: main's record side ended with an error "
                              f"after the batch's verdicts: {type(e).__name__}: {e}")
        for n in B.written_down(state, closing=True):  # settled, or the loop stops
            if n in held:
                self.led.record_hidden(n, held[n].to_dict())
        return state, carried

    def _shape(self, number: int, tip: str, base: str) -> str:
        """What decides main's recording for this job besides the draw
        (``gates.accuracy.recording_shape``); a job whose commits cannot be read gets a shape
        of its own (judged alone: its judgment says why)."""
        from gates.accuracy import recording_shape

        from .pipeline import accuracy_request

        try:
            return recording_shape(accuracy_request(self.cfg, self.ctx.repo.root, tip, base,
                                                    self.ctx.runs, self.ctx.cuda))
        except Exception as e:  # noqa: BLE001 - its own judgment reports it
            return f"unread #{number}: {type(e).__name__}"

    def _share_draws(self) -> bool:
        """Whether jobs may share a hidden draw here: kern.yaml's test.record_once_per_batch is
        on and its sandbox keeps each member's processes from leaving the draw for another's
        (``gates.rules.batch.share_allowed``)."""
        from gates.launch import sandbox
        from gates.rules import batch as B
        from gates.rules.confinement import SandboxUnavailable

        if not self.cfg.test.record_once_per_batch:
            return False
        try:
            return B.share_allowed(sandbox.chosen(self.cfg.sandbox))
        except SandboxUnavailable:
            return False

    def _unjudged(self, number: int, queued: bool, report: TickReport) -> None:
        """An attempt left unjudged because the loop must stop: queued (again), so the next
        loop judges it; one still queued is left as it is."""
        if queued:
            return
        self.led.transition(number, L.QUEUED, reason=f"not judged: the loop stopped ({self._stopping()})")
        report.collected.append((number, L.QUEUED, "not judged: the loop stopped"))

    def _agent_ended(self, number: int, limit: float, now: float) -> bool:
        """Whether attempt ``number``'s agent is done: it wrote a proposal, its process is
        gone, or it ran past ``limit`` seconds (a hung agent, ended when collected)."""
        d = attempt_dir(self.ctx.runs, number)
        if (d / "proposal.json").exists():
            return True
        pid = agent_pid(d)
        if pid is None or not alive(pid):
            return True
        return now - agent_started(d) > limit

    def _collect_agent(self, a, limit: float, report: TickReport) -> str | None:
        """Collect attempt ``a``'s agent: record what it ended with, or (a commit) move it to
        judging and return its tip, which the caller judges."""
        d = attempt_dir(self.ctx.runs, a.number)
        prop_path = d / "proposal.json"
        if not prop_path.exists():
            pid = agent_pid(d)
            if pid is not None and alive(pid):  # collectable: past its limit
                end_agent(pid)
                self._final(a.number, L.TIMED_OUT, f"agent ran past {limit:.0f}s", report)
            else:
                words = agent_last_line(d / "agent.log")
                self._final(a.number, L.CRASHED, f"{L.AGENT_DIED}: {words[:160]} "
                            f"(log {d / 'agent.log'})", report)
                self.agent_crashes += 1
                self.halt = self.halt or planning.agents_broken(
                    self.agent_crashes, self.cfg.loop.stop_after_agent_crashes, words[:200])
            return
        try:
            prop = parse_proposal(prop_path.read_text(errors="replace"))
        except ProposalError as e:
            self._final(a.number, L.CRASHED, f"agent returned garbage in {prop_path}: {e}"[:300],
                        report)
            return
        self.agent_crashes = 0
        self.led.update(a.number, tokens=prop.tokens_in + prop.tokens_out, cost_usd=prop.cost_usd)
        if prop.kind == "declined":
            self.led.transition(a.number, L.NOT_DONE, reason=prop.message[:300],
                                estimate_ms=prop.estimate_ms)
            report.collected.append((a.number, L.NOT_DONE, prop.message[:80]))
            return
        if prop.kind != "commit":  # the backend's own time limit is a timeout, not a crash
            self._final(a.number, L.TIMED_OUT if prop.timed_out else L.CRASHED,
                        f"agent failed: {prop.reason[:300]}", report)
            return
        tip = self.ctx.repo.tip(a.number)
        self.led.transition(a.number, L.JUDGING, commit_sha=tip,
                            title=(prop.message.splitlines() or [a.title])[0][:200])
        return tip

    def _judge(self, number: int, tip: str, base: str, report: TickReport, first=None,
               hold_hidden: bool = False):
        """Judge attempt ``number`` and record its outcome; returns it (None: judging failed,
        recorded as such)."""
        t0 = time.monotonic()
        compile_s = 0.0
        try:
            out = judge_and_record(self.ctx, number, tip, base, first=first, hold_hidden=hold_hidden)
            report.collected.append((number, out.state, out.reason))
            gate = out.fields.get("gate")
            compile_s = (gate.times.compile_main_s if gate is not None and gate.times else None) or 0.0
            return out
        except L.LedgerError:
            raise  # nothing can be recorded: the loop stops, a restart re-queues the attempt
        except NodeLost as e:  # the machine failed, not the candidate: judged once more
            self._final(number, L.CRASHED, f"node lost: {e}"[:300], report)
            self._rerun(number, report)
        except Exception as e:  # noqa: BLE001 - a gate bug must not stop the loop
            reason, stop = failure_reason("judging", e)
            if stop:  # not the candidate's fault: judged again once there is space
                self.led.transition(number, L.QUEUED, reason=reason)
                report.collected.append((number, L.QUEUED, reason))
                self.halt = reason
            else:
                self._final(number, L.CRASHED, reason, report)
        finally:
            self.judged_s.append(time.monotonic() - t0 - compile_s)
            if compile_s:
                self.compile_main_s.append(compile_s)
            self.compiled_mains.add(base)
            self.ctx.repo.close_attempt(number, self.ctx.runs)

    def _stopping(self) -> str | None:
        """Why no judgment starts now (None: one may): the loop halts, or the wall budget left
        is shorter than this loop's longest judgment (:func:`no_time_to_judge`; sticky)."""
        if self.halt:
            return self.halt
        if self.out_of_time is None:
            new_main = self.compile_main_s and self.ctx.repo.main_sha() not in self.compiled_mains
            self.out_of_time = no_time_to_judge(self.cfg.budgets, (time.monotonic() - self.started) / 3600,
                                                self.judged_s, self.cfg.loop.first_judgment_s,
                                                max(self.compile_main_s) if new_main else 0.0)
        return self.out_of_time

    def _rerun(self, number: int, report: TickReport) -> int | None:
        """Attempt ``number`` crashed because its node was lost: its commit is judged once
        more, as a new attempt (queued with the commit, judged by the next tick; a final row
        never changes). A re-run whose node is lost too is not run again."""
        a = self.led.attempt(number)
        if not rerun_wanted(a):
            return None
        n = self.led.new_attempt(title=a.title, hypothesis=a.hypothesis, target=a.target,
                                 backend=a.backend, base_sha=a.base_sha, phase_id=a.phase_id,
                                 tick_id=a.tick_id)
        self.led.update(n, commit_sha=a.commit_sha, rerun_of=number)
        report.collected.append((n, L.QUEUED, f"re-run of #{number}: its node was lost"))
        return n

    def _final(self, number: int, state: str, reason: str, report: TickReport) -> None:
        self.led.transition(number, state, reason=reason)
        report.collected.append((number, state, reason))
        self.ctx.repo.close_attempt(number, self.ctx.runs)

    # ------------------------------------------------------------ trial merges
    def trial_merge(self, tick_id: int, report: TickReport) -> int | None:
        """When this tick judged nothing, or a full trial's worth of near-misses waits, and a
        slot is free (``trials.due``): queue a trial merge of recent near-misses
        (harness/trials.py) as an attempt of its own, judged by a later tick's collect like any
        commit (so in number order). Returns its number, or None."""
        loop = self.cfg.loop
        max_parts = loop.trial_merge_parts
        if max_parts < 2:
            return None
        busy = [a for a in self.led.attempts(states=L.IN_FLIGHT) if a.backend == trials.BACKEND]
        free = 1 if self.ctx.remote is not None else self.ctx.slots().free()
        phase = self.led.phase(phase_definition(self.ctx))
        attempts = self.led.attempts()
        ready = trials.near_misses(attempts, phase, loop.trial_merge_recent)
        if not trials.due(True, self.judged, len(busy), free, len(ready), max_parts):
            return None
        parts = trials.pick_parts(ready, max_parts)
        if not parts:
            return None
        main = self.ctx.repo.main_sha()
        number = self.led.new_attempt(title=trials.title(parts), hypothesis=trials.hypothesis(parts),
                                      target="trial merge", backend=trials.BACKEND, base_sha=main,
                                      phase_id=phase, tick_id=tick_id)
        try:
            applied, tip = trials.form(self.ctx.repo, number, main, parts, self.ctx.runs)
        except Exception as e:  # noqa: BLE001 - recorded; the loop goes on (or stops: disk full)
            reason, stop = failure_reason("forming a trial merge", e)
            self.led.update(number, parts=[a.number for a in parts])
            self._final(number, L.CRASHED, reason, report)
            self.halt = reason if stop else self.halt
            return number
        self.ctx.repo.close_attempt(number, self.ctx.runs)
        if tip is None:  # the same parts are not tried again
            left = [a.number for a in parts if a not in applied]
            why = f"parts {left} do not apply onto main {main[:10]} with the others: fewer than two left"
            self.led.transition(number, L.ABANDONED, reason=L.CONFLICT, parts=[a.number for a in parts],
                                gate=GateSummary(conflict=why))
            report.collected.append((number, L.ABANDONED, L.CONFLICT))
            return number
        self.led.update(number, commit_sha=tip, parts=[a.number for a in applied],
                        title=trials.title(applied), hypothesis=trials.hypothesis(applied))
        report.spawned.append((number, trials.title(applied)))
        return number

    # ------------------------------------------------------------ plan + spawn
    def profile(self) -> dict:
        """The latest profile of main: measured once per main commit and profile definition
        (:func:`profile_path`), on a judging slot, and reused by every later tick and loop."""
        from gates.launch import compiled
        from gates.launch.step import run_step

        sha = self.ctx.repo.main_sha()
        cfg = self.cfg
        spec = profile_spec(cfg.target, cfg.machine, self.ctx.cuda)
        rows = spec["profile_rows"]
        path = profile_path(self.ctx.runs, sha, spec, self.ctx.cuda)
        if path.exists():
            return json.loads(path.read_text())
        self.ctx.progress(f"profiling main {sha[:10]} at {rows} rows")
        partial = path.with_name(path.stem + ".partial.json")
        with gpu_lock(self.ctx) as slot:
            place = self.ctx.placement(slot)
            # a new main (the loop's start, a merge) is compiled from its own source here,
            # before its first side: this profile's and every judgment's against it
            main = compiled.prepare(self.ctx.repo.root, sha, self.ctx.runs, cfg.target,
                                    cfg.machine, self.ctx.cuda, cfg.profile.timeout_s, place)
            self.compiled_mains.add(sha)  # the judgments against it compile nothing more
            if main.wall_s > 0:
                self.compile_main_s.append(main.wall_s)
            res = run_step(self.ctx.repo.root, sha, self.ctx.runs, spec, partial, cfg.profile.timeout_s,
                           place.seeded(main.path))
        if not res.ok:
            raise RuntimeError(f"profiling main failed ({res.kind}); log {res.log_path}")
        # only a whole result is ever found at ``path``: a loop killed while profiling measures
        # again rather than planning from half a file
        partial.replace(path)
        return res.result

    def plan_and_spawn(self, tick_id: int, report: TickReport) -> None:
        in_flight = self.led.attempts(states=[L.QUEUED, L.RUNNING, L.JUDGING])
        slots = self.cfg.loop.concurrency - len(in_flight)
        if slots <= 0:
            return
        measured = self.profile()
        main_profile = measured["profile"]
        self.ceiling = ceiling_text(measured)
        attempts = self.led.attempts()
        journey = [{"target": a.target, "state": a.state, "estimate_ms": a.estimate_ms} for a in attempts]
        targets = planning.plan(main_profile["ops"], main_profile["step_ms"], journey, slots,
                                busy={a.target for a in in_flight}, allowed=self.cfg.loop.targets)
        picks: list = [None] * len(targets)
        if self.cfg.agent.backend == "replay":  # each patch names the target it was written for
            targets, picks = self._replay_targets(main_profile, journey, targets, slots)
        for t, pick in zip(targets, picks):
            if self.halt:
                return
            self._spawn(t, main_profile, attempts, tick_id, report, pick)

    def replay_folder(self) -> Path:
        """The replay backend's folder of patches (kern.yaml ``agent.replay_dir``)."""
        folder = Path(self.cfg.agent.replay_dir or "")
        return folder if folder.is_absolute() else self.ctx.repo.root / folder

    def _replay_targets(self, main_profile: dict, journey: list, planned: list,
                        slots: int) -> tuple[list, list]:
        """The targets of the next ``slots`` replayed patches (the ones their ``Target:`` lines
        name, profile rows or not; a patch that names none, or past the last one, takes the
        planner's pick) and each one's patch: (place in the folder, file name or None past the
        end), picked by :func:`harness.agents.replay.next_patches` over the ledger's rows."""
        from .agents.replay import ReplayUse, next_patches, patch_files, queue_order, target_at

        folder = self.replay_folder()
        names = [p.name for p in patch_files(folder)] if folder.is_dir() else []
        sources = self.led.sources()
        uses = [ReplayUse(sources.get(a.number), agent_never_proposed(a))
                for a in self.led.attempts() if a.backend == "replay"]
        targets, picks = [], []
        try:
            order = queue_order(folder) if folder.is_dir() else []
        except AgentConfigError as e:  # edited while the loop runs: stop it, saying what to mend
            self.halt = str(e)
            return [], []
        for i, place in enumerate(next_patches(names, uses, slots, order)):
            name = target_at(folder, place) if folder.is_dir() else None
            if name is not None:
                targets.append(planning.target_of(name, main_profile["ops"], main_profile["step_ms"],
                                                  journey))
            elif i < len(planned):
                targets.append(planned[i])
            else:
                continue
            picks.append((place, names[place] if place < len(names) else None))
        return targets, picks

    def _spawn(self, t: planning.OpTarget, main_profile: dict, attempts: list, tick_id: int,
               report: TickReport, replay: tuple[int, str | None] | None = None) -> None:
        """Queue and start one agent on ``t``; ``replay``: the replay backend's patch (its place
        in the folder and its file name, recorded in the attempt's row)."""
        ctx = self.ctx
        base = ctx.repo.main_sha()
        phase = self.led.phase(phase_definition(ctx))
        backend = self.cfg.agent.backend
        number = self.led.new_attempt(title=f"{t.name}: {backend} attempt", hypothesis="",
                                      target=t.name, backend=backend, base_sha=base,
                                      phase_id=phase, tick_id=tick_id,
                                      source=replay[1] if replay else None)
        try:
            self._start_agent(number, t, main_profile, attempts, base, report,
                              replay[0] if replay else 0)
        except Exception as e:  # noqa: BLE001 - recorded; the loop goes on (or stops: disk full)
            reason, stop = failure_reason(AGENT_START_FAILED, e)
            self._final(number, L.CRASHED, reason, report)
            if stop:
                self.halt = reason

    def _start_agent(self, number: int, t: planning.OpTarget, main_profile: dict, attempts: list,
                     base: str, report: TickReport, replay_index: int) -> None:
        cfg, ctx = self.cfg, self.ctx
        d = attempt_dir(ctx.runs, number)
        d.mkdir(parents=True, exist_ok=True)
        wt = ctx.repo.open_attempt(number, base, ctx.runs)
        brief = make_brief(cfg, t, main_profile, attempts, number, base, ceiling=self.ceiling)
        text = brief.text
        (d / "brief.json").write_text(json.dumps(brief.as_dict(), indent=1))
        (d / "brief.md").write_text(text)
        settings = {"agent": cfg.agent.options(), "context": {"index": replay_index, "seed": number,
                                                       "root": str(ctx.repo.root)}}
        (d / "settings.json").write_text(json.dumps(settings, indent=1))
        faults.point("spawn")
        start_agent(d, wt)
        self.led.transition(number, L.RUNNING)
        report.spawned.append((number, t.name))

    # ------------------------------------------------------------ one tick
    def tick(self, wait_for_agents: float = 0.0, spawn: bool = True) -> TickReport:
        """Collect and judge; then (``spawn``) plan and brief new agents. A final tick of a
        bounded run passes ``spawn=False`` so it leaves nothing half done."""
        if self.run_id is None:
            self.run_id = self.led.start_run(self.ctx.settings_digest, os.uname().nodename)
        tick_id = self.led.add_tick(self.run_id, [])
        report = TickReport(tick_id)
        self.collect(report)
        if self.out_of_time and not self.halt:  # collected attempts wait (queued) for the next loop
            return self._stop(report, self.out_of_time, L.RUN_BUDGET)
        spent = None if self.halt else self.budget_stop()
        if spent and self.led.attempts(states=L.IN_FLIGHT):
            report.draining = spent  # attempts in flight finish (later ticks judge them); none starts
            return report
        if self.halt or spent:
            return self._stop(report, self.halt or spent, L.RUN_HALTED if self.halt else L.RUN_BUDGET)
        if spawn and self._stopping():  # no judgment fits: a new main's profile and the agents
            # briefed on it would be lost (the next loop profiles and briefs again)
            return self._stop(report, self.out_of_time, L.RUN_BUDGET)
        if spawn:
            self.trial_merge(tick_id, report)
            self.plan_and_spawn(tick_id, report)
        if self.halt:
            return self._stop(report, self.halt, L.RUN_HALTED)
        if wait_for_agents > 0 and report.spawned:
            self.wait_agents([n for n, _ in report.spawned], wait_for_agents)
        # agents still working (or commits waiting to be judged) are not "nothing left"
        useful = any(s in (L.MERGED, L.ABANDONED) for _, s, _ in report.collected) or report.spawned \
            or not spawn or bool(self.led.attempts(states=L.IN_FLIGHT))
        self.idle_ticks = 0 if useful else self.idle_ticks + 1
        if self.idle_ticks >= self.cfg.loop.stop_after_idle_ticks:
            return self._stop(report, f"agents reported nothing left for {self.idle_ticks} ticks", L.RUN_IDLE)
        return report

    def _stop(self, report: TickReport, reason: str, how: str) -> TickReport:
        """The loop stops by itself: why, in the report and in the ledger (``kern status``
        shows it)."""
        report.stop = reason
        self.end(how, reason)
        return report

    def end(self, how: str, reason: str) -> None:
        """Record how this loop's run ended (:data:`harness.ledger.RUN_ENDS`), once; nothing
        when no tick started a run. The caller says how when the loop ends from outside the
        ticks: its ticks done, or interrupted."""
        if self.run_id is None:
            return
        try:
            self.led.stop_run(self.run_id, reason, how=how)
        except L.LedgerError:  # a full disk (the halt's cause): the reason is still printed
            if not self.halt and how != L.RUN_INTERRUPTED:
                raise

    def wait_agents(self, numbers: list[int], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all((attempt_dir(self.ctx.runs, n) / "proposal.json").exists()
                   or not alive(agent_pid(attempt_dir(self.ctx.runs, n)) or -1) for n in numbers):
                return
            time.sleep(0.5)

    def budget_stop(self) -> str | None:
        return budget_spent(self.cfg.budgets, self.led.usage(), (time.monotonic() - self.started) / 3600)


class Ahead:
    """The judgment after member ``number`` (``nxt``, ``gates.rules.overlap.Next``: ``rev``
    against ``base``; the next member of its batch, on the batch's ``hidden`` draw and
    ``recording``, or the next batch's first member, whose batch's draw is made here as the
    scorer starts: ``hidden`` None), prepared while ``number``'s scorer runs
    (gates/rules/overlap.py): told by the gates (``gates.judging.judge``'s ``watch``) when that
    scorer starts, it starts the next judgment's tap sides held, in a thread of its own (the
    harness's part of it, git and the disk, must not hold the scorer up); :meth:`prepared`
    (after member ``number``'s judgment) waits for that thread and gives what it started
    (``gates.accuracy.EarlySides``, None: nothing), with when that scorer ran. The next
    judgment's gate lets them go on. The draw never leaves this process before that gate's
    hand-over: the held sides are told only "go"."""

    def __init__(self, ctx, number: int, nxt, rev: str, base: str, hidden, recording):
        self.ctx, self.number, self.next, self.rev, self.base = ctx, number, nxt, rev, base
        self.hidden, self.recording = hidden, recording
        self.started: float | None = None  # time.monotonic() of the scorer's start, its end
        self.ended: float | None = None
        self.why = ""  # why nothing was started, when nothing was
        self._thread = None
        self._early = None

    def scorer_started(self, placement) -> None:
        import threading

        from .pipeline import draw_hidden

        self.started = time.monotonic()
        if self.hidden is None:  # the next batch's draw: its members all froze when collected
            self.hidden = draw_hidden(self.ctx)
        serves = self.recording is not None and self.recording.keeper is not None
        self._thread = threading.Thread(target=self._prepare, args=(placement, serves), daemon=True)
        self._thread.start()

    def scorer_ended(self) -> None:
        self.ended = time.monotonic()

    def _prepare(self, placement, serves: bool) -> None:
        from gates.accuracy import prepare_early
        from gates.launch import compiled, sandbox
        from gates.rules import overlap

        from .pipeline import accuracy_request

        cfg = self.ctx.cfg
        try:
            req = accuracy_request(cfg, self.ctx.repo.root, self.rev, self.base, self.ctx.runs,
                                   self.ctx.cuda, placement, hidden=self.hidden)
            ready = compiled.existing(req.repo, req.base, req.runs_dir, req.target, req.machine,
                                      req.cuda) is not None
            plan = overlap.early_sides(overlap.NextFacts(serves, sandbox.chosen(cfg.sandbox),
                                                         cfg.test.replay_beside, ready))
            self.why = plan.why
            if plan.sides:
                self._early = prepare_early(req, live=serves, batch=self.next.batch, sides=plan.sides)
        except Exception as e:  # noqa: BLE001 - the next judgment starts its own sides
            self.why = f"preparing failed: {type(e).__name__}: {e}"

    def prepared(self):
        """What was started (None: nothing, or the scorer never started), once the thread ended."""
        if self._thread is None:
            return None
        self._thread.join()
        if self._early is not None:
            self._early.beside(f"#{self.number} scorer", self.started, self.ended)
        return self._early


def budget_spent(b, use: dict, hours: float) -> str | None:
    """Pure: which of kern.yaml's budgets ``b`` (harness.settings.Budgets) the ledger's usage
    ``use`` (attempts, tokens, cost_usd) and this loop's ``hours`` have spent, in words; None
    while none is."""
    if use["attempts"] >= b.attempts:
        return f"attempt budget spent ({use['attempts']} of budgets.attempts {b.attempts})"
    if use["tokens"] >= b.tokens:
        return f"token budget spent ({use['tokens']} of budgets.tokens {b.tokens})"
    if use["cost_usd"] >= b.cost_usd:
        return f"cost budget spent (${use['cost_usd']:.2f} of budgets.cost_usd ${b.cost_usd:.2f})"
    return wall_spent(b, hours)


def wall_spent(b, hours: float) -> str | None:
    """Pure: the wall budget spent after this loop's ``hours``, in words; None while it is not."""
    if hours >= b.wall_hours:
        return f"wall-time budget spent ({hours:.1f} h of budgets.wall_hours {b.wall_hours:g} h)"
    return None


def no_time_to_judge(b, hours: float, judged_s: list[float], first_s: float = 0.0,
                     compile_s: float = 0.0) -> str | None:
    """Pure: why no judgment may start after this loop's ``hours``: the wall budget
    (``b.wall_hours``) has less left than the longest of this loop's judgments (``judged_s``,
    wall seconds less main's compile) plus ``compile_s`` (main's compile, where main changed
    since the last; before the first judgment, ``first_s``: kern.yaml's loop.first_judgment_s),
    or none. One begun anyway could outlast the budget, and a loop killed at its end leaves the
    row judging, judged again from its start by the next loop; an attempt not begun waits
    queued. None while one fits."""
    spent = wall_spent(b, hours)
    if spent:
        return spent
    left = b.wall_hours * 3600 - hours * 3600
    if judged_s:
        longest = max(judged_s) + compile_s
        whose = f"this loop's longest judgment took {max(judged_s):.0f} s" + (
            f" and main's compile {compile_s:.0f} s (main changed since it was compiled)" if compile_s else "")
    else:
        longest, whose = first_s, f"a first judgment is counted (loop.first_judgment_s) as {first_s:.0f} s"
    if left < longest:
        return (f"wall-time budget nearly spent: {left:.0f} s of budgets.wall_hours {b.wall_hours:g} h "
                f"left, and {whose}; the attempts collected wait, queued, for the next loop")
    return None


def rerun_wanted(a: L.Attempt) -> bool:
    """Pure: an attempt that crashed with its node lost is judged once more, unless it is
    itself such a re-run (a commit that takes every node down is not retried forever)."""
    return a.state == L.CRASHED and (a.reason or "").startswith("node lost") and a.rerun_of is None \
        and bool(a.commit_sha)


def profile_spec(target: Target, machine: MachineProfile, cuda: bool) -> dict:
    """Pure: the side spec of the loop's profile of main (128 rows on a GPU, the largest
    bucket on the CPU; 5 replays). On a GPU with the leave-one-out column: per-call events
    overstate a small op by its launch overhead (the H200's rows sum to 2.7x the step), and the
    planner ranks by what removing a row saves (harness/planning.py). Its cost, counted from
    gates/side/driver.py's profile(): per row one eager run, a capture (two warm-up runs and the
    captured one) and 10 replays, ~2 s at an 85 ms step, ~30-40 s for 16 rows, once per main
    (a merge); unmeasured on the H200 so far. The CPU keeps events only: its times are
    mechanics, and the tests' profiles stay as fast as they were."""
    from gates.spec import side_spec

    rows = 128 if cuda else max(machine.buckets)
    return side_spec(target, machine, steps=1, rows=[rows], replays=5, profile_rows=rows, free=cuda)


def profile_path(runs: Path, sha: str, spec: dict, cuda: bool) -> Path:
    """Pure: where main's profile at ``sha`` is kept. The name holds everything that decides
    the profile's content: the commit, the side's spec (model, layout, rows, replays, context:
    kern.yaml's machine profile) and the device kind, so a changed kern.yaml measures again and a
    ``kern profile`` by hand (its own spec) is never taken for the loop's."""
    import hashlib

    key = hashlib.sha256(json.dumps({"spec": spec, "cuda": cuda}, sort_keys=True,
                                    default=str).encode()).hexdigest()[:10]
    return runs / "profile" / f"{sha[:12]}-loop-{key}.json"
