"""What the gates and the loop say while they run, read as plain data: the bars ``kern test``
and ``kern bench`` draw on a terminal, and the gate and stage of the attempt ``kern loop``'s
live view shows.

Pure functions over typed events, dispatched on their type (never on their text): the gates'
(``gates/events.py``: the scorer's rounds, the accuracy gate's passes, a judgment's gate
starting, its accuracy verdict, its re-measurement, a scorer event inside it) and the loop's
own (below: a rebase, an attempt ends). ``str(event)`` is the line a person reads:

    kern bench   side A: ready (build 3s, capture 1s)     a side's process is up
                 round 2: side B done                      one visit of B in round 2
                 judging the timed outputs against main's  main's process compares them
    kern test    A record     12s  <the side's last log line>
                 B replay      3s  …                       a pass of a side, its elapsed time
                 A noise       8s  …
                 accuracy gate: B replay ended with <kind>: <its last log line> (log <path>)
    kern loop    accuracy gate: <rev> vs <base>, accuracy: <verdict>, scorer: <rev> vs <base>,
                 "  <a scorer event>", <gate>: <side> ended with <kind>: <last words> (log
                 <path>), attempt #n: <state>

Anything else a progress callback is given (a plain string: a note of the loop's, a farm
lock's wait) moves no bar and no stage. The shells (harness/cli/judge.py, harness/cli/loop.py)
render the events with rich on a terminal and print their lines otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import ClassVar, Iterable, Sequence

from gates.events import (PASSES, AccuracyVerdict, GateStarted, InScorer, JudgingTimedOutputs, PassTick,
                          Remeasuring, SideEnded, SideReady, VisitDone)


@dataclass(frozen=True)
class Bar:
    key: str  # the side ("A", "B") or the side's pass ("A record", "B replay", "A noise")
    label: str
    done: int  # visits finished (bench); 0 for a pass whose length is not known
    total: int | None  # None: no total known, the bar shows activity and elapsed time
    detail: str  # the round, or the side's last log line
    finished: bool = False
    elapsed_s: float | None = None  # a test pass's own clock, as its progress line said


# --------------------------------------------------------------------------- kern bench
def bench_bars(order: Sequence[str], rounds: int) -> tuple[Bar, ...]:
    """One bar per side, its total the side's visits in ``order`` (gates.scorer.pattern: A B B A
    per round with a base, B alone otherwise)."""
    sides = sorted(set(order))
    return tuple(Bar(k, f"side {k}", 0, order.count(k), f"round 0/{rounds}: starting")
                 for k in sides)


def bench_step(bars: tuple[Bar, ...], event, rounds: int) -> tuple[tuple[Bar, ...], bool]:
    """``bars`` after one of run_bench's progress events, and whether it moved a bar (False:
    print its line as it is, e.g. the store's or a re-measurement's notice)."""
    by = {b.key: b for b in bars}
    if isinstance(event, VisitDone) and event.side in by:
        b = by[event.side]
        done = min(b.done + 1, b.total or b.done + 1)
        by[b.key] = replace(b, done=done, detail=f"round {event.round}/{rounds}",
                            finished=b.total is not None and done >= b.total)
        return tuple(by[b.key] for b in bars), True
    if isinstance(event, SideReady) and event.side in by:
        b = by[event.side]
        r = b.detail.split(":")[0] if b.done else f"round 1/{rounds}"
        by[b.key] = replace(b, detail=f"{r}: {event.summary}")
        return tuple(by[b.key] for b in bars), True
    if isinstance(event, JudgingTimedOutputs) and "A" in by:
        by["A"] = replace(by["A"], detail=str(event))
        return tuple(by[b.key] for b in bars), True
    return bars, False


# --------------------------------------------------------------------------- kern test
PASS_LABELS = dict(zip(PASSES, ("main's kernels compiled from main alone", "side A: main records its tap",
                                "side B: the candidate replays it", "side A again: main's noise passes")))


def test_step(bars: tuple[Bar, ...], event) -> tuple[tuple[Bar, ...], bool]:
    """``bars`` after one of run_test's progress events (a ``PassTick``): the pass named gets
    or updates its bar, the pass before it is finished."""
    if not isinstance(event, PassTick):
        return bars, False
    tag, t, text = event.tag, float(event.elapsed_s), event.line.strip()
    out = [b if b.key == tag or b.finished else replace(b, finished=True) for b in bars]
    if any(b.key == tag for b in out):
        out = [replace(b, detail=text, elapsed_s=t) if b.key == tag else b for b in out]
    else:
        out.append(Bar(tag, PASS_LABELS.get(tag, tag), 0, None, text, False, t))
    return tuple(out), True


def finish(bars: Iterable[Bar]) -> tuple[Bar, ...]:
    """Every bar stopped (the gate returned): the visits stay as counted, so a gate that ended
    early shows where it stopped."""
    return tuple(replace(b, finished=True) for b in bars)


# --------------------------------------------------------------------------- kern loop
@dataclass(frozen=True)
class Stage:
    rev: str  # the commit being judged (its SHA, or as much of it as the caller knows)
    gate: str  # "accuracy", "scorer", "scorer (again)"
    stage: str  # the latest thing the gate said
    since: float  # when the gate began (the caller's clock, as stamped on the line)
    stage_since: float


class _Said:
    """A loop event whose line is its ``LINE`` filled with its fields (``{rev:.10}``: 10 digits)."""
    LINE: ClassVar[str] = ""

    def __str__(self) -> str:
        return self.LINE.format(**{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Rebased(_Said):
    """Main moved while the attempt was judged: its commit is rebased and judged again."""
    LINE: ClassVar[str] = "attempt #{number}: main moved; rebased onto {onto:.10}, judging again"
    number: int
    onto: str


@dataclass(frozen=True)
class AttemptEnded:
    number: int
    state: str
    reason: str | None = None

    def __str__(self) -> str:
        return f"attempt #{self.number}: {self.state}{': ' + self.reason if self.reason else ''}"


def stage_of(events: Iterable[tuple[float, object]]) -> Stage | None:
    """The gate running now and its latest stage, from ``(time, event)`` pairs of the loop's
    progress in order (gates run one at a time under the GPU lock); None when none runs."""
    cur = None
    for t, e in events:
        if isinstance(e, GateStarted):
            cur = Stage(e.rev, e.gate, "starting", t, t)
        elif isinstance(e, Remeasuring):
            cur = Stage(e.rev, "scorer (again)", "starting", t, t)
        elif cur is None:
            continue
        elif isinstance(e, (AttemptEnded, Rebased)):
            cur = None
        elif isinstance(e, AccuracyVerdict) and cur.gate == "accuracy":
            cur = replace(cur, stage=e.verdict, stage_since=t)
        elif isinstance(e, InScorer):
            cur = replace(cur, stage=str(e.event), stage_since=t)
        elif isinstance(e, SideEnded):  # its last words until the attempt's end is recorded
            cur = replace(cur, stage=f"{e.side} ended with {e.kind}" + (f": {e.last}" if e.last else ""),
                          stage_since=t)
    return cur


def fmt_duration(s: int, units: tuple[str, str, str] = ("s", "m", "h"), sep: str = "") -> str:
    """Whole seconds ``s`` in the two largest units it needs: ``42s``, ``3m05s``, ``2h07m``.
    ``units`` names seconds, minutes and hours; ``sep`` stands between each number and its
    unit and between the two parts (``" "`` and ``("s", "min", "h")``: ``4 min 12 s``)."""
    if s < 60:
        return f"{s}{sep}{units[0]}"
    if s < 3600:
        return f"{s // 60}{sep}{units[1]}{sep}{s % 60:02d}{sep}{units[0]}"
    return f"{s // 3600}{sep}{units[2]}{sep}{s % 3600 // 60:02d}{sep}{units[1]}"


def fmt_elapsed(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h07m`` (whole seconds elapsed, counted down); '' when unknown."""
    if seconds is None or seconds < 0:
        return ""
    return fmt_duration(int(seconds))


def _since(stamp: str | None, now: float) -> float | None:
    from datetime import datetime

    try:
        t = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    if t.tzinfo is None:
        return None  # a naive stamp says nothing about the epoch
    return now - t.timestamp()


def live_rows(attempts: Iterable, stage: Stage | None, now: float, result=None) -> list[tuple]:
    """The live view's rows (``#``, target, state, gate · stage, elapsed, result) for the
    ledger's ``attempts``, ``stage`` (:func:`stage_of`) and ``now`` (seconds since the epoch,
    the clock the stage's times and the ledger's stamps share). An attempt in flight shows what
    it waits on: its agent (running), its turn (queued), or the gate judging its commit and
    that gate's latest stage, with the time spent in it; ``result`` renders a final one."""
    out = []
    for a in attempts:
        gate, elapsed = "", None
        if a.state == "judging":
            sha = a.commit_sha or ""
            if stage is not None and sha and sha.startswith(stage.rev):
                gate = f"{stage.gate} · {stage.stage}"
                elapsed = now - stage.since
            else:
                gate = "judging"
                elapsed = _since(a.updated_at, now)
        elif a.state == "running":
            gate, elapsed = "agent at work", _since(a.updated_at, now)
        elif a.state in ("queued", "waiting"):
            gate, elapsed = ("waiting for a slot" if a.state == "queued"
                             else f"waiting on #{a.waiting_on}"), _since(a.updated_at, now)
        res = result(a) if result is not None and a.state not in ("queued", "running", "judging",
                                                                  "waiting") else ""
        out.append((str(a.number), a.target or "-", a.state, gate, fmt_elapsed(elapsed), res))
    return out
