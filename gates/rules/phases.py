"""Where one judgment's time went: each phase's seconds, per side where there are sides.

The facts are measured where the work runs: each side process reports its own spans
(``gates.protocol.SidePhases``: build, Triton's compiles, tap, capture, save, from its own
clock, ``gates/side/clock.py``); the coordinator measures each process's wall (so a side's
``start`` is its wall less what it measured itself: process start, imports, the tree's import,
the hand-over, the exit) and its own work (checkouts, the verdict, the scorer's rounds). They
are kept as :class:`Span` rows in each gate's report (key ``phases``) and, for the whole
judgment, as :class:`JudgmentTimes` in ``runs/attempts/<n>/judgment-<k>.json`` (key ``times``),
``kern show N`` and ``bench/tools/judging_times.py``.

Spans do not overlap: a side's time spent waiting on another (main's record side alive while
the candidate replays; the replay waiting while main writes its kept op calls) is counted where
the work was done, not twice. The candidate's replay starts beside main's record side: what it
does before its hand-over (start, import, build) runs while main records and is kept apart
(:func:`split_at_hand_over`; the accuracy report's ``beside``), so the spans still add up to
the gate's wall; :class:`Beside` carries those spans with the report's ``timeline`` into
:class:`JudgmentTimes` (how much of them main's recording covered). Pure: no I/O, no clock.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..protocol import SidePhases

GATES = ("accuracy", "scorer", "remeasure")
# the phases, in the order a judgment meets them. "compile_main": the harness compiling main's
# Triton cache in a compile-only process of its own (the slot for that process's seconds,
# part "coordinator"); "unmeasured": a side that reported no phases (it crashed, or a judgment
# kept before phases were recorded: its whole wall)
PHASES = ("start", "build", "attach", "compile_main", "compile", "tap", "capture", "save", "rounds", "verify",
          "judge", "extras", "checkout", "verdict", "other", "unmeasured")
SIDE_PHASES = ("build", "attach", "compile", "tap", "capture", "save")  # what a side measures itself


@dataclass(frozen=True)
class Span:
    """``seconds`` of ``phase`` spent by ``part`` ("A record", "B replay", "A noise",
    "coordinator", "store", "A", "B", "rounds") in ``gate`` (:data:`GATES`)."""

    gate: str
    part: str
    phase: str
    seconds: float

    def to_dict(self) -> dict:
        return {"gate": self.gate, "part": self.part, "phase": self.phase, "seconds": self.seconds}

    @staticmethod
    def from_dict(d: dict) -> "Span":
        return Span(str(d["gate"]), str(d["part"]), str(d["phase"]), float(d["seconds"]))


def side_spans(gate: str, part: str, wall_s: float, phases: SidePhases | dict | None) -> list[Span]:
    """Pure: one side process's spans from its wall (the coordinator's clock) and what it
    measured itself; ``start`` is the rest of its wall, less the time it waited on another
    side (counted where that work ran). A side with no phases is one ``unmeasured`` span."""
    if isinstance(phases, dict):
        phases = SidePhases.from_dict(phases)
    if phases is None:
        return [Span(gate, part, "unmeasured", wall_s)] if wall_s > 0 else []
    own = {"build": phases.build_s, "attach": phases.attach_s, "compile": phases.compile_s or 0.0, "tap": phases.tap_s,
           "capture": phases.capture_s, "save": phases.save_s}
    start = max(0.0, wall_s - phases.wait_s - sum(own.values()))
    return [Span(gate, part, "start", start)] + [
        Span(gate, part, k, v) for k, v in own.items() if v > 0]


def split_at_hand_over(gate: str, part: str, wall_s: float, phases: SidePhases | dict | None,
                       before: SidePhases | dict | None, released_s: float | None
                       ) -> tuple[list[Span], list[Span]]:
    """Pure: the spans of a side that started beside another (the candidate's replay, started
    with main's record side: it imports and builds while main records), split at its
    hand-over: (on the judgment's path: what it did once it had its hidden inputs; beside:
    what it did before, while the other's spans count that time). ``before``: its phases when
    it got its hidden inputs (their wait included: :func:`side_spans` leaves it out); the
    process's start and end outside its driver's clock count as beside. A side that reported
    no phases (it crashed) splits its wall at ``released_s`` (seconds from its start to its
    release by the coordinator; None: never released, all beside), each part ``unmeasured``."""
    if isinstance(phases, dict):
        phases = SidePhases.from_dict(phases)
    if isinstance(before, dict):
        before = SidePhases.from_dict(before)
    if phases is None or before is None:
        cut = wall_s if released_s is None else min(wall_s, max(0.0, released_s))
        return side_spans(gate, part, wall_s - cut, None), side_spans(gate, part, cut, None)
    path_s = max(0.0, phases.driver_s - before.driver_s)

    def less(a, b):
        return None if a is None else max(0.0, a - (b or 0.0))

    after = SidePhases(driver_s=path_s, build_s=less(phases.build_s, before.build_s),
                       attach_s=less(phases.attach_s, before.attach_s),
                       compile_s=less(phases.compile_s, before.compile_s),
                       tap_s=less(phases.tap_s, before.tap_s),
                       capture_s=less(phases.capture_s, before.capture_s),
                       save_s=less(phases.save_s, before.save_s),
                       wait_s=less(phases.wait_s, before.wait_s))
    return side_spans(gate, part, path_s, after), side_spans(gate, part, max(0.0, wall_s - path_s), before)


def rest(gate: str, wall_s: float, spans: list[Span], part: str = "coordinator") -> list[Span]:
    """Pure: ``wall_s`` less every span of ``gate`` so far, as the coordinator's ``other``."""
    used = sum(s.seconds for s in spans if s.gate == gate)
    return [Span(gate, part, "other", wall_s - used)] if wall_s - used > 0 else []


def scorer_spans(report: dict | None, gate: str = "scorer") -> list[Span]:
    """Pure: a scorer report's spans: its own (key ``phases``) when it recorded them, else
    what a report kept before phases were recorded shows (each side's build and capture, the
    timed rounds, the timed outputs' saving and judging)."""
    if not report:
        return []
    if report.get("phases") is not None:
        return [Span.from_dict({**d, "gate": gate}) for d in report["phases"]]
    out = []
    for side, opened in sorted((report.get("prepare") or {}).items()):
        for i, p in enumerate(opened):
            part = side if i == 0 else f"{side}-{i + 1}"
            out += [Span(gate, part, k, p[f"{k}_s"]) for k in ("build", "capture") if p.get(f"{k}_s")]
    rounds = sum(c.get("wall_ms") or 0.0 for cs in (report.get("checks") or {}).values() for c in cs) / 1e3
    out += [Span(gate, "rounds", "rounds", rounds)] if rounds else []
    save, judge = sum(report.get("timed_save_s") or []), report.get("timed_judge_s") or 0.0
    out += [Span(gate, "rounds", k, v) for k, v in (("save", save), ("judge", judge)) if v]
    return out + rest(gate, report.get("wall_s") or 0.0, out)


def accuracy_spans(report: dict | None) -> list[Span]:
    """Pure: an accuracy report's spans: its own when it recorded them, else each side's wall
    as it kept them (one ``unmeasured`` span per side that ran)."""
    if not report:
        return []
    if report.get("phases") is not None:
        return [Span.from_dict(d) for d in report["phases"]]
    out = []
    for part, key in (("A record", "a_wall_s"), ("B replay", "b_wall_s"), ("A noise", "noise_wall_s")):
        out += side_spans("accuracy", part, report.get(key) or 0.0, None)
    return out + rest("accuracy", report.get("wall_s") or 0.0, out)


# a side that starts beside another (gates/accuracy.py): its part -> (the part it runs beside,
# the accuracy report's ``timeline`` keys of its start and release, of the other's start and
# of the end of the work it runs beside: main's RECORDED)
BESIDE_PAIRS = {"B replay": ("A record", "b_started", "b_released", "a_started", "a_recorded"),
                # a tap side of this judgment started beside the previous judgment's scorer, held
                # at its hold point until its go (gates/rules/overlap.py; the accuracy report's
                # ``early`` names that scorer: "#7 scorer"): from its start to its go, beside
                # the scorer from its start to its end (its last GPU work)
                "A early": ("scorer", "a_early", "a_go", "scorer_started", "scorer_done"),
                "B early": ("scorer", "b_early", "b_go", "scorer_started", "scorer_done")}


EARLY_PARTS = ("A early", "B early")


@dataclass(frozen=True)
class Beside:
    """What side ``part`` did beside side ``of``'s work, off the gate's path: the candidate's
    replay, started with main's record side, starts, imports its tree and builds its model
    while main records; or a tap side started early (``A early``, ``B early``) starts up to
    its hold point while the previous judgment's scorer runs (``of``: "#7 scorer", its times
    before this gate's start, so negative). ``spans`` are that work (never among :attr:`JudgmentTimes.spans`,
    which add up to the gate's wall); the times are seconds from the gate's start (the
    report's ``timeline``; None: it did not happen, or was not kept)."""

    gate: str
    part: str  # the side that started beside ("B replay")
    of: str  # the side whose work it ran beside ("A record")
    spans: tuple[Span, ...]
    started_s: float | None = None  # ``part``'s process started
    released_s: float | None = None  # ``part`` got its inputs (None: never: it ended first)
    of_started_s: float | None = None  # ``of``'s process started
    of_done_s: float | None = None  # ``of``'s work ended (main said RECORDED; None: never)

    @property
    def seconds(self) -> float:
        """The work ``part`` did before its hand-over (its wait for it left out)."""
        return sum(s.seconds for s in self.spans)

    @property
    def overlap_s(self) -> float | None:
        """Seconds of that work that ran while ``of`` was still at its work (None: no
        timeline kept). The work runs from ``part``'s start without a pause until its wait
        (its process's exit, counted beside, is short); when ``of`` never finished its work,
        ``part`` was ended with it and all of its work ran beside it."""
        if self.started_s is None:
            return None
        if self.of_done_s is None:
            return self.seconds
        ends = [self.started_s + self.seconds, self.of_done_s]
        ends += [self.released_s] if self.released_s is not None else []
        begin = max(self.started_s, self.of_started_s if self.of_started_s is not None else self.started_s)
        return min(self.seconds, max(0.0, min(ends) - begin))

    @property
    def after_s(self) -> float | None:
        """Seconds of that work that ran after ``of`` had finished its: they held up
        ``part``'s release, so they are on the gate's path, where no side's span covers them
        (the coordinator's ``other`` holds them)."""
        overlap = self.overlap_s
        return None if overlap is None else self.seconds - overlap

    def by_phase(self) -> dict:
        """``{phase: seconds}`` of that work, in :data:`PHASES` order."""
        sums: dict = {}
        for s in self.spans:
            sums[s.phase] = sums.get(s.phase, 0.0) + s.seconds
        return {p: sums[p] for p in sorted(sums, key=_phase_order)}

    def view(self) -> dict:
        """As ``kern show --json`` and bench/tools/judging_times.py print it: as kept, with
        its phases, its seconds and how much of them the other side's work covered."""
        return {**self.to_dict(), "phases": self.by_phase(), "seconds": self.seconds,
                "overlap_s": self.overlap_s, "after_s": self.after_s}

    def to_dict(self) -> dict:
        return {"gate": self.gate, "part": self.part, "of": self.of,
                "spans": [s.to_dict() for s in self.spans], "started_s": self.started_s,
                "released_s": self.released_s, "of_started_s": self.of_started_s,
                "of_done_s": self.of_done_s}

    @staticmethod
    def from_dict(d: dict) -> "Beside":
        return Beside(str(d["gate"]), str(d["part"]), str(d["of"]),
                      tuple(Span.from_dict(s) for s in d.get("spans") or ()),
                      *(_secs_or_none(d.get(k)) for k in ("started_s", "released_s", "of_started_s", "of_done_s")))


def _secs_or_none(x) -> float | None:
    return None if x is None else float(x)


def accuracy_beside(report: dict | None) -> tuple[Beside, ...]:
    """Pure: what ran beside what in an accuracy report: its ``beside`` spans, one
    :class:`Beside` per part, with its ``timeline``. A report kept before the replay started
    beside main's recording (no ``beside``), or one where it did not (sandbox off, a cached
    recording), has none."""
    out = []
    spans = [Span.from_dict(d) for d in (report or {}).get("beside") or ()]
    timeline = (report or {}).get("timeline") or {}
    early_of = ((report or {}).get("early") or {}).get("of")  # whose scorer the early sides ran beside
    for part in dict.fromkeys(s.part for s in spans):
        of, *keys = BESIDE_PAIRS.get(part, ("", None, None, None, None))
        of = early_of if part in EARLY_PARTS and early_of else of
        out.append(Beside(spans[0].gate, part, of, tuple(s for s in spans if s.part == part),
                          *(_secs_or_none(timeline.get(k)) if k else None for k in keys)))
    return tuple(out)


@dataclass(frozen=True)
class JudgmentTimes:
    """One judgment's seconds: each gate's wall, the whole judgment's, every span on the
    gates' paths (each gate's add up to its wall) and what ran beside them (``beside``)."""

    accuracy_s: float | None
    scorer_s: float | None  # the first scorer run (None: it did not run)
    remeasure_s: float | None  # the re-measurement of a large gain (None: none)
    total_s: float | None  # from the scope gate to the last gate's end (None: not kept)
    spans: tuple[Span, ...] = ()
    beside: tuple[Beside, ...] = ()  # off the path: the candidate's start and build

    @staticmethod
    def of(test: dict | None, bench: dict | None, total_s: float | None = None) -> "JudgmentTimes":
        """Pure: the times of a judgment from its gates' reports (``report_of`` forms);
        ``total_s`` as the pipeline measured it (None: not measured, never their sum)."""
        again = (bench or {}).get("reverify")
        spans = accuracy_spans(test) + scorer_spans(bench) + scorer_spans(again, "remeasure")
        walls = [(r or {}).get("wall_s") for r in (test, bench, again)]
        return JudgmentTimes(walls[0], walls[1], walls[2], total_s, tuple(spans), accuracy_beside(test))

    @property
    def overlap_s(self) -> float | None:
        """Seconds of work off the path that ran beside another side's (None: nothing ran
        beside, or no timeline was kept)."""
        known = [b.overlap_s for b in self.beside if b.overlap_s is not None]
        return sum(known) if known else None

    def by_phase(self, gate: str | None = None) -> dict:
        """``{phase: seconds}`` summed over parts (of ``gate``, or all), in :data:`PHASES` order."""
        sums: dict = {}
        for s in self.spans:
            if gate is None or s.gate == gate:
                sums[s.phase] = sums.get(s.phase, 0.0) + s.seconds
        return {p: sums[p] for p in sorted(sums, key=_phase_order)}

    def by_part(self, gate: str) -> dict:
        """``{part: {phase: seconds}}`` of ``gate``, parts in the order they first appear, the
        coordinator's last."""
        out: dict = {}
        for s in self.spans:
            if s.gate == gate:
                row = out.setdefault(s.part, {})
                row[s.phase] = row.get(s.phase, 0.0) + s.seconds
        parts = sorted(out, key=lambda part: part == "coordinator")
        return {part: {p: out[part][p] for p in sorted(out[part], key=_phase_order)} for part in parts}

    def to_dict(self) -> dict:
        return {"accuracy_s": self.accuracy_s, "scorer_s": self.scorer_s,
                "remeasure_s": self.remeasure_s, "total_s": self.total_s,
                "spans": [s.to_dict() for s in self.spans],
                "beside": [b.to_dict() for b in self.beside]}

    @staticmethod
    def from_dict(d) -> "JudgmentTimes | None":
        if not isinstance(d, dict):
            return None
        return JudgmentTimes(d.get("accuracy_s"), d.get("scorer_s"), d.get("remeasure_s"),
                             d.get("total_s"), tuple(Span.from_dict(s) for s in d.get("spans") or ()),
                             tuple(Beside.from_dict(b) for b in d.get("beside") or ()))

    @staticmethod
    def of_judgment(doc: dict) -> "JudgmentTimes":
        """Pure: the times a judgment file (``{"test", "bench", "times"?}``) holds: its own
        record, else what its reports show (judgments kept before times were recorded). Times
        kept before they carried ``beside`` take it from the accuracy report, which kept it."""
        kept = JudgmentTimes.from_dict(doc.get("times"))
        if kept is None:
            return JudgmentTimes.of(doc.get("test"), doc.get("bench"))
        if "beside" not in doc["times"]:
            return replace(kept, beside=accuracy_beside(doc.get("test")))
        return kept


def _phase_order(phase: str) -> int:
    return PHASES.index(phase) if phase in PHASES else len(PHASES)
