"""One judgment's gates, end to end: the one entry harness/ calls to judge a commit that passed
the scope gate (harness/pipeline.py). A :class:`~gates.requests.JudgmentRequest` goes in, a
:class:`GatesRun` comes out (the gates' results, the merge rule's decision over them, what the
ledger row keeps, the judgment's seconds); meanwhile ``progress`` is told each
:data:`~gates.events.JudgmentEvent` (typed: harness/ renders them).

Shell: the hidden inputs drawn (where the caller drew none), the disk's room for one judgment
(its tap, its scorer's timed outputs), then the accuracy gate (gates/accuracy.py); when it
passes, the scorer (gates/scorer.py) on the same commit, base, hidden inputs and placement,
held to the accuracy gate's bar, in this host's scorer turn (gates/launch/turn.py); when the
scorer measured a gain above ``bench.reverify_pct`` % with every check clean
(``rules.decision.needs_reverify``), the scorer again: fresh processes, the sides alternating,
an input seed of its own. The scorer and its re-measurement lease one model store
(gates/launch/store.py: the weights built once, verified before and after each run, a decode
state built for each run): the caller's ``stores``, which it keeps across judgments on its
slot, or one of the judgment's own, ended with it. Which gate runs next is all this decides: the verdicts are the
gates', the merge rule gates/rules/decision.py's (``gates.summary.decided``)."""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, replace

from . import accuracy, scorer
from .events import AccuracyVerdict, GateStarted, InScorer, Remeasuring, SideEnded
from .launch import disk
from .launch.store import ModelStores
from .launch.turn import scorer_turn
from .protocol import Hidden
from .requests import JudgmentRequest
from .results import AccuracyResult, BenchResult, report_of
from .rules import decision, footprint, hidden
from .rules.phases import JudgmentTimes
from .summary import GateSummary, decided


@dataclass(frozen=True)
class GatesRun:
    """What one judgment's gates found and what the merge rule made of it."""

    test: AccuracyResult
    bench: BenchResult | None  # None: the accuracy gate did not pass, the scorer did not run
    hidden: Hidden  # the inputs both gates ran on
    decision: decision.Decision
    summary: GateSummary  # what the ledger row keeps of the gates up to the deciding one
    times: JudgmentTimes


def judge(req: JudgmentRequest, progress=None, recording=None, early=None, watch=None,
          stores: ModelStores | None = None) -> GatesRun:
    """The gates on ``req`` (module docstring). Raises ``footprint.DiskShort`` before any
    side starts when runs/ lacks the room for one judgment. ``recording``: the batch's shared
    recording of main (``gates.accuracy.MainRecording``) this judgment's accuracy gate replays
    against; ``req``'s hidden inputs must be its draw. ``early``: its tap sides, started
    beside the previous judgment's scorer (``gates.accuracy.EarlySides``; adopted, they lease
    no model store: gates/rules/overlap.py ``tap_lease``). ``watch``: told
    ``scorer_started(placement)`` as the scorer starts and ``scorer_ended()`` once its last GPU
    work ended (every run, the re-measure included, and its lease of the model store released:
    the weights verified), whatever ends it (the loop prepares the next judgment meanwhile:
    gates/rules/overlap.py). ``stores``: the model store the caller holds for this judgment's
    slot across judgments (None: the judgment's own, ended with it)."""
    say = progress or (lambda event: None)
    t, b = req.test, req.bench
    if not req.scope.ok or (t.repo, t.rev, t.base, t.placement, t.hidden) != \
            (b.repo, b.rev, b.base, b.placement, b.hidden):
        raise ValueError(f"a judgment's gates run after its scope gate passed, on one commit, base, "
                         f"placement and hidden draw; got scope ok={req.scope.ok}, the accuracy "
                         f"gate's {t.rev} vs {t.base} and the scorer's {b.rev} vs {b.base} (a bug "
                         f"of the caller, harness/pipeline.py)")
    if recording is not None and t.hidden != recording.hidden:
        raise ValueError("a batch member's gates run on the batch's hidden draw; the request carries "
                         "another (a bug of the caller, harness/pipeline.py)")
    drawn = t.hidden if t.hidden is not None else hidden.for_machine(t.machine, t.accuracy)
    t, b = replace(t, hidden=drawn), replace(b, hidden=drawn)
    room_for(req)
    # the model store the gates' sides lease (the accuracy gate's tap sides, the scorer and its
    # re-measurement): the caller's, kept after, else the judgment's own, ended with it
    with (nullcontext(stores) if stores is not None else ModelStores()) as held:
        say(GateStarted("accuracy", t.rev, t.base))
        # (on the CPU the store's decide says none, no CUDA IPC: the gate is asked as before)
        more = {k: v for k, v in (("recording", recording), ("early", early)) if v is not None}
        if recording is None and t.cuda:
            more["stores"] = held
        test = AccuracyResult.of(accuracy.run_test(t, **more))
        say(AccuracyVerdict(test.verdict))
        for w in test.last_words:
            say(SideEnded("accuracy gate", w.side, w.kind, w.last, w.log))
        bench = None
        if test.passed:
            if watch is not None:
                watch.scorer_started(b.placement)
            try:
                bench = _scored(req, replace(b, accuracy=test.claim), t, say, held)
            finally:  # its lease of the store released (the weights verified): the store, kept
                # across judgments, idles; no GPU work of this judgment is left
                if watch is not None:
                    watch.scorer_ended()
    d, summary = decided(req.scope, test, bench)
    total = None if req.started_s is None else time.monotonic() - req.started_s
    return GatesRun(test, bench, drawn, d, summary,
                    JudgmentTimes.of(report_of(test), report_of(bench), total))


def _scored(req: JudgmentRequest, first, t, say, held: ModelStores | None = None) -> BenchResult:
    """The scorer on ``first`` and, where its gain is large, its re-measurement, both on one
    model store: ``held`` (the caller's, kept after), else one ended here, whatever ends the
    judgment."""
    say(GateStarted("scorer", first.rev, first.base))
    with (nullcontext(held) if held is not None else ModelStores()) as stores:
        with scorer_turn(first.runs_dir, req.isolate, say):
            bench = BenchResult.of(scorer.run_bench(first, progress=lambda e: say(InScorer(e)),
                                                    stores=stores))
        pct = first.scorer.reverify_pct
        if decision.needs_reverify(bench, pct):
            say(Remeasuring(first.rev, pct))
            again = replace(first, alternate=True, hidden=hidden.for_machine(t.machine, t.accuracy),
                            rounds=first.scorer.reverify_rounds)
            with scorer_turn(first.runs_dir, req.isolate, say):
                bench = bench.with_reverify(BenchResult.of(
                    scorer.run_bench(again, progress=lambda e: say(InScorer(e, again=True)),
                                     stores=stores)))
    for w in (bench.last_words, bench.reverify.last_words if bench.reverify else None):
        if w is not None:
            say(SideEnded("scorer", w.side, w.kind, w.last, w.log))
    return bench


def room_for(req: JudgmentRequest) -> None:
    """Before any side of a judgment starts: what a killed earlier run left in runs/tap
    deleted, then :class:`~gates.rules.footprint.DiskShort` unless runs/ has room for what one
    judgment of the configured workload writes (its tap, then its scorer's timed outputs)."""
    t, b = req.test, req.bench
    need = footprint.judgment_bytes(t.machine, t.accuracy, b.scorer,
                                    copies=disk.copied(t.placement.sandbox))
    disk.sweep(t.runs_dir / "tap")
    disk.check({t.runs_dir / "tap": need.tap, b.runs_dir / "bench": need.scorer})
