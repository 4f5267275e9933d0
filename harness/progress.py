"""What the gates' progress lines say, as plain data: the bars ``kern test`` and ``kern bench``
draw on a terminal, and the gate and stage of the attempt ``kern loop``'s live view shows.

Pure functions over the lines the gates already emit (their ``progress`` callbacks are the
contract; nothing here changes them):

    kern bench   side A: ready (build 3s, capture 1s)     a side's process is up
                 round 2: side B done                      one visit of B in round 2
                 judging the timed outputs against main's  main's process compares them
    kern test    A record     12s  <the side's last log line>
                 B replay      3s  …                       a pass of a side, its elapsed time
                 A noise       8s  …
    kern loop    accuracy gate: <rev> vs <base>, accuracy: <verdict>, scorer: <rev> vs <base>,
                 "  <a scorer line>", attempt #n: <state>

The shells (harness/commands.py, harness/loop_cmd.py) render them with rich on a terminal and
print the lines as they are otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, Sequence


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


_READY = re.compile(r"^side (?P<k>\w+): ready\b(?P<rest>.*)$")
_ROUND = re.compile(r"^round (?P<r>\d+): side (?P<k>\w+) done$")


def bench_step(bars: tuple[Bar, ...], line: str, rounds: int) -> tuple[tuple[Bar, ...], bool]:
    """``bars`` after one of run_bench's progress lines, and whether the line moved a bar
    (False: print it as it is, e.g. the store's line or a re-measurement's notice)."""
    by = {b.key: b for b in bars}
    m = _ROUND.match(line.strip())
    if m and m["k"] in by:
        b = by[m["k"]]
        done = min(b.done + 1, b.total or b.done + 1)
        by[b.key] = replace(b, done=done, detail=f"round {m['r']}/{rounds}",
                            finished=b.total is not None and done >= b.total)
        return tuple(by[b.key] for b in bars), True
    m = _READY.match(line.strip())
    if m and m["k"] in by:
        b = by[m["k"]]
        r = b.detail.split(":")[0] if b.done else f"round 1/{rounds}"
        by[b.key] = replace(b, detail=f"{r}: ready{m['rest']}")
        return tuple(by[b.key] for b in bars), True
    if line.strip().startswith("judging the timed outputs") and "A" in by:
        by["A"] = replace(by["A"], detail="judging the timed outputs against main's")
        return tuple(by[b.key] for b in bars), True
    return bars, False


# --------------------------------------------------------------------------- kern test
_PASS = re.compile(r"^(?P<tag>[AB] (?:record|replay|noise))\s+(?P<t>\d+)s\s{2}(?P<line>.*)$")
PASS_LABELS = {"A record": "side A: main records its tap", "B replay": "side B: the candidate replays it",
               "A noise": "side A again: main's noise passes"}


def test_step(bars: tuple[Bar, ...], line: str) -> tuple[tuple[Bar, ...], bool]:
    """``bars`` after one of run_test's progress lines (``TAG  Ns  last log line``): the pass
    named gets or updates its bar, the pass before it is finished."""
    m = _PASS.match(line)
    if not m:
        return bars, False
    tag, t, text = m["tag"], float(m["t"]), m["line"].strip()
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
    rev: str  # the commit being judged, as the line named it (10 hex digits)
    gate: str  # "accuracy", "scorer", "scorer (again)"
    stage: str  # the latest thing the gate said
    since: float  # when the gate began (the caller's clock, as stamped on the line)
    stage_since: float


_GATE = re.compile(r"^(?P<gate>accuracy gate|scorer): (?P<rev>[0-9a-f]{4,40}) vs ")
_AGAIN = re.compile(r"^scorer: a gain above .*: measuring (?P<rev>[0-9a-f]{4,40}) again$")
_VERDICT = re.compile(r"^accuracy: (?P<v>.+)$")
_ENDED = re.compile(r"^attempt #\d+: ")


def stage_of(lines: Iterable[tuple[float, str]]) -> Stage | None:
    """The gate running now and its latest stage, from ``(time, line)`` pairs of the loop's
    progress in order (gates run one at a time under the GPU lock); None when none runs."""
    cur = None
    for t, line in lines:
        m = _GATE.match(line)
        if m:
            gate = "accuracy" if m["gate"] == "accuracy gate" else "scorer"
            cur = Stage(m["rev"], gate, "starting", t, t)
            continue
        m = _AGAIN.match(line)
        if m:
            cur = Stage(m["rev"], "scorer (again)", "starting", t, t)
            continue
        if cur is None:
            continue
        if _ENDED.match(line):
            cur = None
        elif _VERDICT.match(line) and cur.gate == "accuracy":
            cur = replace(cur, stage=line.split(": ", 1)[1], stage_since=t)
        elif line.startswith("  "):
            cur = replace(cur, stage=line.strip().removeprefix("again: "), stage_since=t)
    return cur


def fmt_elapsed(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h07m``; '' when unknown."""
    if seconds is None or seconds < 0:
        return ""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


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
