"""One attempt through every gate: scope -> bit-identity/accuracy -> A/B scorer -> guard ->
decision -> ledger row -> merge (serialized, fast-forward only; rebase and re-judge when main
moved; a conflict is an outcome). ``kern try`` and the loop's ticks both come here.

The decisions are pure: the merge rule is ``gates.rules.decision.decide`` over the gates' typed
results (``gates.results``), what the row keeps of them ``gates.summary.summarize`` (a typed
``GateSummary``), ``decide_outcome`` adds the measured numbers the ledger records; the rest is
shell around the gates, git and the ledger. Every path ends in a ledger state with a reason.
"""
from __future__ import annotations

import errno
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gates.events import GateStarted
from gates.requests import AccuracyRequest, BenchRequest, JudgmentRequest, Placement
from gates.results import AccuracyResult, BenchResult, report_of
from gates.rules import decision, footprint, scope, stats
from gates.rules.phases import JudgmentTimes
from gates.summary import GateSummary, TimesSummary, decided

from . import farm, faults, processes
from . import ledger as L
from . import progress as P
from .settings import Resolved
from .worktrees import Repo

if TYPE_CHECKING:  # gates.judging imports torch: kern's verbs that judge nothing never load it
    from gates.judging import GatesRun


@dataclass
class Context:
    """What judging and the loop work with: the repository, kern.yaml resolved for this
    machine (``cfg``: each gate is handed its section), the runs folder, the ledger."""
    repo: Repo
    cfg: Resolved
    runs: Path
    cuda: bool
    ledger: L.Ledger
    progress: callable = print  # the loop's events (harness/progress.py) and plain notes
    settings_digest: str = ""
    pool: "farm.Pool | None" = None  # the judging slots (None: kern.yaml's farm.slots, on first use)
    remote: object = None  # farm.kind ray: the harness.ray_farm.RayFarm judgments are sent to
    # the model store each slot keeps across this process's judgments (gates/launch/store.py's
    # ModelStores, by slot name), held by kern loop and kern try (:func:`holding_stores`); None:
    # each judgment starts its own and ends it
    stores: dict | None = None
    # what judges here (judged_on(), read once): part of the phase's definition
    _judged_on: str | None = field(default=None, init=False, repr=False)

    def stores_for(self, slot: "farm.Slot"):
        """The model store ``slot`` keeps across judgments (None: none is held here)."""
        if self.stores is None:
            return None
        from gates.launch.store import ModelStores

        return self.stores.setdefault(slot.name, ModelStores())

    def slots(self) -> "farm.Pool":
        if self.pool is None:
            self.pool = farm.Pool(self.runs, farm.slots_for(self.cfg.farm, self.cuda))
        return self.pool

    def judged_on(self) -> str:
        """``cpu`` or the models of this machine's judging GPUs (:func:`farm.slot_models`);
        a Ray farm's nodes are not read from here: ``ray farm`` then."""
        if self._judged_on is None:
            if self.remote is not None:
                self._judged_on = "ray farm"
            else:
                slots = self.slots().slots
                self._judged_on = farm.slot_models(slots, farm.gpu_listing() if self.cuda else [])
        return self._judged_on

    def placement(self, slot: "farm.Slot") -> Placement:
        """Where the sides of a judgment on ``slot`` (held) run, under kern.yaml's sandbox."""
        return self.slots().placement(slot, self.cfg.sandbox)


@dataclass
class Judgment:
    """What judging one commit against its base found: the gates' results as data, the
    hidden inputs they ran on and the slot that ran them. The same from a local slot and
    from a Ray task (harness/ray_farm.py)."""

    scope: object
    test: AccuracyResult | None
    bench: BenchResult | None
    hidden: object  # gates.protocol.Hidden
    host: str | None = None
    slot: str | None = None
    seconds: float | None = None  # the whole judgment's wall, scope gate to last gate (its slot's clock)
    run: GatesRun | None = None  # the gates' whole answer (None: the scope gate rejected it)


@dataclass
class Outcome:
    state: str  # merged | abandoned | crashed | timed out
    reason: str | None
    fields: dict = field(default_factory=dict)
    # a batch's hidden draw this outcome was judged on, not yet in the row (written down once
    # the batch is settled: harness/orchestrator.py, gates/rules/batch.py); None: none held
    held_hidden: object = None


@contextmanager
def holding_stores(ctx: "Context"):
    """The block's judgments on each slot lease one model store across judgments (the weights
    built once per slot while their code holds); every store ends with the block (its end,
    Ctrl-C, an error). Judgments sent to a Ray cluster keep their own."""
    ctx.stores = {}
    try:
        yield ctx
    finally:
        close_stores(ctx)


def close_stores(ctx: "Context") -> None:
    """End every model store ``ctx`` holds (:func:`holding_stores`); later judgments keep their own."""
    stores, ctx.stores = ctx.stores or {}, None
    for held in stores.values():
        held.close()


@contextmanager
def gpu_lock(ctx: "Context"):
    """Gates that run kernels hold one judging slot (harness/farm.py) for the block and their
    processes see only its GPUs: parallel judgments never time each other's runs. Yields the
    :class:`farm.Slot`."""
    with ctx.slots().hold() as slot:
        yield slot


def phase_definition(ctx: Context) -> dict:
    """What the score means: a change here starts a new phase (deltas not comparable)."""
    from kernels.k31.workload import corpus_hash

    cfg = ctx.cfg
    m = cfg.machine
    return {"model": m.model, "layout": m.layout, "buckets": list(m.buckets),
            "weights": list(m.weights), "context": m.context, "seed": cfg.target.seed,
            "corpus": corpus_hash(), "replay": REPLAY_PROTOCOL, "device": ctx.judged_on()}


# What one timed replay is. 3 (issue 35): one step of input set n from the seeded recurrent
# state scaled per row and set, at positions advanced by n, with tokens no row decodes twice
# and the MLA slots it wrote put back after it (gates/side/timed.py; no row's inputs repeat
# within a judgment, as in real decode); 2 (2026-12-01): one step from the seeded state at the
# workload's step-1 positions, tokens repeating per row across sets; 1 (before 2026-12-01, no
# key): a chain of steps whose positions advanced with the input set. Scores of different
# protocols are not comparable.
REPLAY_PROTOCOL = 3


def decide_outcome(scope_res, test_res, bench_res) -> Outcome:
    """Pure: gate results (typed, or their reports: ``gates.results``) -> final state, reason
    and the fields the ledger records. The rule itself is ``gates.rules.decision.decide``, what the
    row keeps of the gates ``gates.summary.summarize`` (both: ``gates.summary.decided``, which a
    judgment's ``GatesRun`` carries already); :func:`outcome_of` adds the measured numbers."""
    test = None if test_res is None else AccuracyResult.of(test_res)
    bench = None if bench_res is None else BenchResult.of(bench_res)
    return outcome_of(*decided(scope_res, test, bench), bench)


def outcome_of(d: decision.Decision, gate: GateSummary, bench: BenchResult | None) -> Outcome:
    """Pure: the merge rule's decision ``d`` and the row's summary ``gate`` as the ledger's
    state, reason and fields, with the measured numbers of a decision made by the score."""
    if d.by != decision.BY_SCORE:
        return Outcome(d.state, d.reason, {"gate": gate})
    sa, sb, ab = bench.a, bench.b, bench.ab
    buckets = bench.buckets
    fields = {
        "gate": gate,
        "medians_a": {str(b): sa.medians[b] for b in buckets},
        "medians_b": {str(b): sb.medians[b] for b in buckets},
        "delta_ms": ab.delta_ms, "ci_low": ab.low, "ci_high": ab.high, "delta_pct": ab.delta_pct,
        "decision": "merge" if d.state == decision.MERGED else d.reason,
    }
    return Outcome(d.state, d.reason, fields)


def check_scope(ctx: Context, rev_sha: str, base_sha: str) -> scope.ScopeResult:
    """The scope gate on one commit: its paths, size, and what its editable files contain."""
    commits = ctx.repo.commits_since(base_sha, rev_sha)
    cfg = ctx.cfg
    editable = [p for p in commits.paths if scope.matches(p, list(cfg.editable))]
    sources = {p: (ctx.repo.blob(base_sha, p), ctx.repo.blob(rev_sha, p)) for p in editable}
    return scope.check(commits=len(commits.shas), paths=commits.paths,
                       changed_lines=commits.changed_lines, editable=list(cfg.editable),
                       protected=list(cfg.protected), sources=sources)


def draw_hidden(ctx: Context):
    """One judgment's hidden inputs, from this process's own randomness (gates/rules/hidden.py)."""
    from gates.rules import hidden

    return hidden.for_machine(ctx.cfg.machine, ctx.cfg.test)


def judge(ctx: Context, rev_sha: str, base_sha: str, hidden=None) -> tuple:
    """Run the gates on one commit against its base, both gates on the same hidden inputs
    (``hidden``; None: the gates draw them). Returns (scope, test, bench) results."""
    j = judgment(ctx, rev_sha, base_sha, hidden)
    return j.scope, j.test, j.bench


def judgment(ctx: Context, rev_sha: str, base_sha: str, hidden=None, recording=None, early=None,
             watch=None) -> Judgment:
    """:func:`judge` as a :class:`Judgment`: the gates on one free slot of this machine. The
    walk crosses into gates/ twice: the scope gate on the commit's facts (a ``ScopeResult``
    back), then, past it, one :class:`JudgmentRequest` to ``gates.judging.judge`` (a
    ``GatesRun`` back: the results, the decision, the row's summary, the times). ``recording``:
    a batch's shared recording of main (``gates.accuracy.MainRecording``; ``hidden`` its draw);
    ``early``, ``watch``: the loop's overlap of judgments (``gates.judging.judge``)."""
    t0 = time.monotonic()
    faults.point("scope")
    sc = check_scope(ctx, rev_sha, base_sha)
    if not sc.ok:
        return Judgment(sc, None, None, hidden, seconds=time.monotonic() - t0)
    with gpu_lock(ctx) as slot:
        run = run_gates(ctx, judgment_request(ctx, sc, rev_sha, base_sha, hidden, ctx.placement(slot), t0),
                        recording, early, watch, ctx.stores_for(slot))
    return Judgment(sc, run.test, run.bench, run.hidden, slot.host, slot.name, run.times.total_s, run)


def judge_once(ctx: Context, rev_sha: str, base_sha: str, hidden, label: str = "") -> Judgment:
    """One judgment where kern.yaml's farm says: a local slot, or a task of the Ray cluster
    (``ctx.remote``; may raise ``ray_farm.NodeLost``)."""
    if ctx.remote is not None:
        return ctx.remote.submit(ctx, rev_sha, base_sha, hidden, label)()
    return judgment(ctx, rev_sha, base_sha, hidden)


def run_gates(ctx: Context, req: JudgmentRequest, recording=None, early=None, watch=None,
              stores=None) -> GatesRun:
    """The judgment's gates (``gates.judging.judge``) on the slot the caller holds; their
    events reach ``ctx.progress`` (:func:`told`). ``recording``: a batch's shared recording;
    ``early``, ``watch``: the loop's overlap of judgments; ``stores``: the slot's model store,
    kept across judgments (None: the judgment's own)."""
    from gates import judging

    more = {k: v for k, v in (("recording", recording), ("early", early), ("watch", watch),
                              ("stores", stores)) if v is not None}
    return judging.judge(req, progress=lambda event: told(ctx, event), **more)


def told(ctx: Context, event) -> None:
    """A judgment's event to the loop's progress; where a gate starts, first the fault point
    of that step (harness/faults.py: the tests kill the process there)."""
    if isinstance(event, GateStarted):
        faults.point("test" if event.gate == "accuracy" else "bench")
    ctx.progress(event)


def judgment_request(ctx: Context, sc: scope.ScopeResult, rev_sha: str, base_sha: str, hidden,
                     place: Placement, started_s: float | None = None) -> JudgmentRequest:
    """One judgment of ``rev_sha`` against ``base_sha`` past its scope gate ``sc``: both gates'
    requests at ``place`` on the hidden inputs ``hidden`` (None: the gates draw them)."""
    cfg, root = ctx.cfg, ctx.repo.root
    return JudgmentRequest(sc, accuracy_request(cfg, root, rev_sha, base_sha, ctx.runs, ctx.cuda, place, hidden=hidden),
                           bench_request(cfg, root, rev_sha, base_sha, ctx.runs, ctx.cuda, place, hidden=hidden),
                           isolate=cfg.farm.isolate, started_s=started_s)


def accuracy_request(cfg: Resolved, repo: Path, rev: str, base: str, runs: Path, cuda: bool,
                     place: Placement | None = None, **more) -> AccuracyRequest:
    """The accuracy gate's request on ``rev`` against ``base``: its sections of kern.yaml, its
    sides at ``place`` (None: outside a slot, under kern.yaml's sandbox; ``more``: the
    request's other fields, e.g. ``hidden``, ``world``)."""
    return AccuracyRequest(repo, rev, base, cfg.target, cfg.machine, cfg.test, cfg.protected,
                           runs, cuda, place or Placement(sandbox=cfg.sandbox), **more)


def bench_request(cfg: Resolved, repo: Path, rev: str, base: str | None, runs: Path, cuda: bool,
                  place: Placement | None = None, **more) -> BenchRequest:
    """The scorer's request on ``rev`` (against ``base``; None: alone): its sections of
    kern.yaml, the verdict's thresholds among them, its sides at ``place`` (None: outside a
    slot, under kern.yaml's sandbox; ``more``: the request's other fields)."""
    return BenchRequest(repo, rev, base, cfg.target, cfg.machine, cfg.bench, cfg.test, runs,
                        cuda, place or Placement(sandbox=cfg.sandbox), **more)


def judge_and_record(ctx: Context, number: int, rev_sha: str, base_sha: str,
                     max_rebases: int = 3, first=None, hold_hidden: bool = False) -> Outcome:
    """Judge attempt ``number`` and bring it to a final state; merge when it wins.

    ``first``: a callable giving the :class:`Judgment` of ``rev_sha`` against ``base_sha``
    already under way on another slot (or a Ray node): the orchestrator judges several
    attempts at once and applies their outcomes here, in number order. It may raise what
    judging raised. A re-judgment after a rebase is judged here, on a free slot.
    ``hold_hidden``: ``first`` judges on a batch's draw, which the row gets only once the batch
    is settled (the outcome's ``held_hidden``; the caller writes it: ``Ledger.record_hidden``)."""
    led, repo = ctx.ledger, ctx.repo
    for _ in range(max_rebases + 1):
        if merged_unrecorded(led.attempt(number), rev_sha, repo.git.git.merge_base(repo.main_sha(), rev_sha)):
            # killed after moving main but before recording it: record, never merge twice
            return _record_found_merge(ctx, number, rev_sha)
        # a decision taken before a rebase no longer holds
        led.update(number, base_sha=base_sha, commit_sha=rev_sha, decision=None)
        batched = first is not None and hold_hidden  # this judgment is on a batch's draw
        if first is not None:
            j, first = first(), None
        else:  # every judgment its own hidden inputs, a re-judgment after a rebase too
            # (a Ray task is handed its draw; on this machine the gates draw it)
            j = judge_once(ctx, rev_sha, base_sha, draw_hidden(ctx) if ctx.remote is not None else None,
                           f"{number}-{rev_sha[:10]}")
        sc, test, bench, hidden = j.scope, j.test, j.bench, j.hidden
        # the gates' own answer where they ran; a scope rejection is decided here
        times = j.run.times if j.run is not None else JudgmentTimes(None, None, None, j.seconds)
        keep_evidence(ctx.runs, number, test, bench, times)
        _record_baseline(ctx, base_sha, bench)
        faults.point("decision")
        out = decide_outcome(sc, test, bench) if j.run is None else \
            outcome_of(j.run.decision, j.run.summary, j.run.bench)
        out = with_times(with_slot(with_hidden(out, hidden if test is not None else None,
                                               held=batched), j), times)
        if (out.reason or "").startswith(footprint.REASON):
            # the environment's, not the candidate's: the row keeps the side's last words, the
            # caller re-queues it (the loop, which stops) or ends it (kern try)
            led.update(number, gate=out.fields["gate"])
            raise footprint.DiskShort(out.reason)
        if out.state != "merged":
            # no commit: the tip is the base, whose note belongs to whoever made main
            return _finish(ctx, number, out, rev_sha, note=rev_sha != base_sha)
        main = repo.main_sha()
        if main == base_sha and out.held_hidden is not None:
            # a merge settles its batch (gates/rules/batch.py): its draw goes into the merged
            # row now (a merged row never changes afterwards)
            out = replace(out, fields={**out.fields, "hidden": out.held_hidden.to_dict()},
                          held_hidden=None)
        # the evidence reaches the ledger before main moves, so a loop killed between the
        # merge and its record finds the decision and the numbers on resume
        led.update(number, **out.fields)
        if main == base_sha:
            # a Ctrl-C waits: main moved and the ledger not told would be a merge nobody saw
            with processes.signals_held():
                faults.point("merge")
                if repo.fast_forward_main(rev_sha):
                    faults.point("ledger")
                    _record_score(ctx, rev_sha, out.fields["medians_b"])
                    return _finish(ctx, number, out, rev_sha)
        # main moved while judging: rebase and judge again against the new main
        ok, tip = repo.rebase(number, main, ctx.runs, tip=rev_sha)
        if not ok:
            # the row keeps what the gates said on the older main, and why it could not land
            judged = out.fields.get("gate") or GateSummary()
            return _finish(ctx, number, Outcome("abandoned", "conflict",
                                                {"gate": replace(judged, conflict=tip)}), rev_sha)
        ctx.progress(P.Rebased(number, main))
        rev_sha, base_sha = tip, main
    return _finish(ctx, number, Outcome("abandoned", "conflict", {"gate": GateSummary(conflict="main kept moving")}), rev_sha)


def with_hidden(out: Outcome, hidden, held: bool = False) -> Outcome:
    """Pure: ``out`` with the judgment's hidden inputs among the fields the ledger records
    (only once the decision is made: while judging they live in this process and the sides;
    None when no gate ran on them). ``held``: a batch's draw, not in the row's fields but held
    (``held_hidden``) until the batch is settled."""
    if hidden is None:
        return out
    if held:
        return replace(out, held_hidden=hidden)
    return replace(out, fields={**out.fields, "hidden": hidden.to_dict()})


def with_times(out: Outcome, times: JudgmentTimes) -> Outcome:
    """Pure: ``out`` with the judgment's seconds per gate in the row's gate summary (the
    phases themselves stay in the judgment's file)."""
    gate = out.fields.get("gate")
    if gate is None:
        return out
    compiled = [x.seconds for x in times.spans if x.phase == "compile_main"]
    summary = TimesSummary(accuracy_s=times.accuracy_s, scorer_s=times.scorer_s,
                           remeasure_s=times.remeasure_s, total_s=times.total_s,
                           compile_main_s=sum(compiled) if compiled else None)
    return replace(out, fields={**out.fields, "gate": replace(gate, times=summary)})


def with_slot(out: Outcome, j: Judgment) -> Outcome:
    """Pure: ``out`` with the host and slot that judged it among the ledger's fields (none
    when no gate process ran: a scope rejection)."""
    if j.slot is None:
        return out
    return replace(out, fields={**out.fields, "host": j.host, "slot": j.slot})


def keep_evidence(runs: Path, number: int, test, bench, times: JudgmentTimes | None = None) -> Path:
    """The gates' full results of one judgment, beside the attempt's other files
    (``runs/attempts/<n>/``, one file per judgment: a rebase judges again). The ledger row holds
    the decision's summary; these hold every sample, check and timing behind it, and the
    judgment's phases (``times``: gates/rules/phases.py)."""
    d = runs / "attempts" / str(number)
    d.mkdir(parents=True, exist_ok=True)
    n = len(list(d.glob("judgment-*.json"))) + 1
    path = d / f"judgment-{n}.json"
    doc = {"test": report_of(test), "bench": report_of(bench)}
    if times is not None:
        doc["times"] = times.to_dict()
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        tmp.replace(path)
    except OSError as e:  # a full disk is the environment's: named, never a traceback
        tmp.unlink(missing_ok=True)
        if e.errno == errno.ENOSPC:
            raise footprint.DiskShort(f"{footprint.REASON}: {d} is full: the judgment's evidence "
                                 f"({path.name}) could not be written; the operator must free "
                                 f"space on that disk", str(d)) from e
        raise
    return path


def merged_unrecorded(attempt: L.Attempt, rev_sha: str, merge_base: str) -> bool:
    """Pure: main holds ``rev_sha`` because this attempt merged it and was killed before the
    ledger said so. The recorded decision is required: a tip already on main for any other
    reason (an agent that never committed leaves its tip at the base) is judged, not merged."""
    return attempt.decision == "merge" and attempt.commit_sha == rev_sha and merge_base == rev_sha


def _record_found_merge(ctx: Context, number: int, sha: str) -> Outcome:
    a = ctx.ledger.attempt(number)
    if a.medians_b:
        _record_score(ctx, sha, a.medians_b)
    return _finish(ctx, number, Outcome("merged", None, {"decision": "merge"}), sha)


def _record_score(ctx: Context, sha: str, medians_b: dict) -> None:
    """Main's score at ``sha``: the weighted mean of B's per-bucket medians, as the scorer
    computed it; once per commit, also when a resumed loop records a merge it finds."""
    phase = ctx.ledger.phase(phase_definition(ctx))
    if any(s.sha == sha for s in ctx.ledger.scores(phase)):
        return
    m = ctx.cfg.machine
    score = stats.score({int(b): v for b, v in medians_b.items()}, list(m.buckets), list(m.weights))
    ctx.ledger.record_score(phase, sha, score, dict(medians_b))


def _record_baseline(ctx: Context, base_sha: str, bench) -> None:
    """Main's score at ``base_sha`` from an A/B's A side, when the phase has none for it yet
    (a run with no merge still shows where main stands; after a merge B's score is recorded).
    Not when main has moved past ``base_sha`` since the attempt was made: that is an older main."""
    a = None if bench is None else BenchResult.of(bench).a
    if a is None or ctx.repo.main_sha() != base_sha:
        return
    phase = ctx.ledger.phase(phase_definition(ctx))
    latest = ctx.ledger.latest_score(phase)
    if latest is None or latest.sha != base_sha:
        ctx.ledger.record_score(phase, base_sha, a.score, {str(b): m for b, m in a.medians.items()})


def note_for(a: L.Attempt) -> str:
    """Pure: the git note (``refs/notes/kern``) an attempt leaves on its commit."""
    acc = a.gate.accuracy if a.gate is not None else None
    verdict = (acc.verdict if acc is not None else None) or ""
    return json.dumps({"attempt": a.number, "state": a.state, "reason": a.reason,
                       "accuracy": verdict, "delta_ms": a.delta_ms, "ci": [a.ci_low, a.ci_high]})


def _finish(ctx: Context, number: int, out: Outcome, sha: str, note: bool = True) -> Outcome:
    led = ctx.ledger
    fields = dict(out.fields)
    if out.state == "merged":
        fields["commit_sha"] = sha
    led.transition(number, out.state, reason=out.reason, **fields)
    faults.point("notes")
    if note:
        try:
            ctx.repo.add_note(sha, note_for(led.attempt(number)))
        except Exception as e:  # noqa: BLE001 - a note is evidence, not a decision
            ctx.progress(f"note on {sha[:10]} failed: {e}")
    ctx.progress(P.AttemptEnded(number, out.state, out.reason))
    return out


def change_target(ctx: Context, base_sha: str, rev_sha: str) -> str:
    """The profile row(s) a commit works on, from the ops its files belong to ('' when it
    touches what no single op owns)."""
    from gates.launch.checkout import changed_paths
    from kernels.k31 import contracts

    from .planning import row_of_change

    touched = contracts.ops_touched_by(changed_paths(ctx.repo.root, base_sha, rev_sha))
    return row_of_change(touched, {op.name: op.family for op in contracts.OPS.values()})


def try_commit(ctx: Context, rev: str, *, title: str | None = None, backend: str = "manual",
               target: str | None = None) -> tuple[int, Outcome]:
    """``kern try REV``: one commit, its own ledger attempt, all gates, merge if it wins.
    ``target``: the profile row it works on (default: what its files belong to)."""
    repo = ctx.repo
    rev_sha = repo.sha(rev)
    base_sha = repo.git.git.merge_base(repo.main_sha(), rev_sha)
    subject = repo.git.commit(rev_sha).summary
    phase = ctx.ledger.phase(phase_definition(ctx))
    number = ctx.ledger.new_attempt(title=title or subject, hypothesis=repo.git.commit(rev_sha).message,
                                    target=target if target is not None else change_target(ctx, base_sha, rev_sha),
                                    backend=backend, base_sha=base_sha, phase_id=phase)
    ctx.ledger.transition(number, L.JUDGING, commit_sha=rev_sha)
    folder = ctx.runs / "attempts" / str(number)
    processes.mark_judge(folder)  # kern doctor and kern cancel find this process by it
    try:
        return number, judge_and_record(ctx, number, rev_sha, base_sha)
    except footprint.DiskShort as e:  # the row ends saying so; kern's main says it and exits 4
        ctx.ledger.transition(number, L.CRASHED, reason=str(e)[:600])
        ctx.progress(P.AttemptEnded(number, L.CRASHED, str(e)))
        raise
    except (KeyboardInterrupt, SystemExit) as e:
        # Ctrl-C, a SIGTERM (harness/cli's handler exits 128 + its number) or kern cancel:
        # the attempt ends here as interrupted, not judging for ever
        with processes.signals_held():
            _interrupted(ctx.ledger, number, interruption(e, _cancel_reason(folder)), rev_sha)
        raise
    finally:  # a rebase (main moved) opened one
        repo.close_attempt(number, ctx.runs)


CANCEL_FILE = "cancel.txt"  # in an attempt's folder: why kern cancel ended it


def _cancel_reason(folder: Path) -> str | None:
    try:
        return (folder / CANCEL_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def interruption(e: BaseException, cancelled: str | None) -> str:
    """Pure: the reason an interrupted attempt records, from what stopped its ``kern try``
    (``e``: KeyboardInterrupt for SIGINT, SystemExit(128 + n) from harness/cli's SIGTERM
    handler) and the reason ``kern cancel`` left (None when it did not)."""
    import signal

    if cancelled is not None:
        return f"cancelled: {cancelled}"
    if isinstance(e, KeyboardInterrupt):
        how = "SIGINT (Ctrl-C)"
    else:
        code = e.code if isinstance(e, SystemExit) and isinstance(e.code, int) else None
        try:
            how = signal.Signals(code - 128).name if code and code > 128 else f"exit {code}"
        except ValueError:
            how = f"exit {code}"
    return f"{how} to kern try while judging"


def _interrupted(led: L.Ledger, number: int, reason: str, rev_sha: str) -> None:
    """Attempt ``number`` ends as interrupted, unless it already reached a final state (the
    signal came after its verdict was recorded)."""
    if led.attempt(number).state in L.FINAL:
        return
    led.transition(number, L.INTERRUPTED, reason=f"{reason}; `kern try {rev_sha[:12]} --again` "
                                                 f"judges it again")
