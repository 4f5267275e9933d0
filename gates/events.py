"""What a gate says while it runs, as typed events: the scorer's (``run_bench``'s ``progress``),
the accuracy gate's passes (``run_test``'s) and a whole judgment's (``gates/judging.py``'s: a
gate starts, the accuracy verdict, a re-measurement, a scorer event inside it). ``str(event)`` is the line a person reads (the
lines the gates printed before these types existed); ``harness/progress.py`` moves its bars and
the loop's live stage by an event's type and fields, never by matching its text.

Pure data: nothing here imports torch, the kernel tree or a launcher.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StoreReady:
    """The scorer's model store leased the model to this run over CUDA IPC: its weights built
    for it, or (``reused``) built for an earlier run of the judgment and verified unchanged,
    with a decode state built for this run (``state_s``)."""
    build_s: float
    reused: bool = False
    state_s: float | None = None

    def __str__(self) -> str:
        if self.reused:
            return (f"store: weights reused (verified unchanged), state built in "
                    f"{self.state_s or 0.0:.0f}s, shared over CUDA IPC")
        return f"store: model built in {self.build_s:.0f}s, shared over CUDA IPC"


@dataclass(frozen=True)
class SideReady:
    """A scorer side's process is up: its model built (or attached) and every bucket captured."""
    side: str  # "A" (the base) or "B" (the candidate)
    build_s: float
    capture_s: float
    process: int | None = None  # when the sides alternate: which of the side's processes

    @property
    def summary(self) -> str:
        return (f"ready (build {self.build_s:.0f}s, capture {self.capture_s:.0f}s)"
                + (f", process {self.process} (sides alternate)" if self.process is not None else ""))

    def __str__(self) -> str:
        return f"side {self.side}: {self.summary}"


@dataclass(frozen=True)
class VisitDone:
    """One visit of a side in the scorer's rounds (A B B A per round with a base) is timed."""
    round: int  # from 1
    side: str

    def __str__(self) -> str:
        return f"round {self.round}: side {self.side} done"


@dataclass(frozen=True)
class JudgingTimedOutputs:
    """Main's side compares the candidate's timed outputs with its own."""

    def __str__(self) -> str:
        return "judging the timed outputs against main's"


@dataclass(frozen=True)
class PassTick:
    """A pass of an accuracy gate's side is running: its elapsed time and its latest log line
    (the side's own words: text, never parsed)."""
    tag: str  # PASSES: "main compile", "A record", "B replay", "A noise"
    elapsed_s: float
    line: str

    def __str__(self) -> str:
        return f"{self.tag} {self.elapsed_s:5.0f}s  {self.line}"


@dataclass(frozen=True)
class SideEnded:
    """A side of a gate ended badly: how, its last log line and where its log is (the
    ``gates.results.LastWords`` of that side, as plain fields)."""
    gate: str  # "accuracy gate" or "scorer"
    side: str  # a pass of PASSES, or the scorer's "side A" / "side B"
    kind: str  # how it ended (gates/launch/process.py's kinds)
    last: str  # its log's last line ('' when it said nothing)
    log: str | None

    def __str__(self) -> str:
        said = f": {self.last}" if self.last else ""
        return f"{self.gate}: {self.side} ended with {self.kind}{said}" + (f" (log {self.log})" if self.log else "")


# the accuracy gate's passes, in the order they run ("main compile": only where main's compiled
# kernels were not made before, gates/launch/compiled.py)
PASSES = ("main compile", "A record", "B replay", "A noise")

ScorerEvent = StoreReady | SideReady | VisitDone | JudgingTimedOutputs


# ----------------------------------------------------------- one judgment (gates/judging.py)
@dataclass(frozen=True)
class GateStarted:
    """A judgment starts a gate (``gate``: "accuracy" or "scorer") on commit ``rev`` (a full
    SHA) against ``base``."""
    gate: str
    rev: str
    base: str

    @property
    def label(self) -> str:
        return "accuracy gate" if self.gate == "accuracy" else self.gate

    def __str__(self) -> str:
        return f"{self.label}: {self.rev:.10} vs {self.base:.10}"


@dataclass(frozen=True)
class AccuracyVerdict:
    """The judgment's accuracy gate decided."""
    verdict: str  # "PASS bit-identical", "FAIL", ...

    def __str__(self) -> str:
        return f"accuracy: {self.verdict}"


@dataclass(frozen=True)
class Remeasuring:
    """A gain above ``bench.reverify_pct`` %: the scorer measures the commit again."""
    rev: str
    pct: float

    def __str__(self) -> str:
        return f"scorer: a gain above {self.pct:g} %: measuring {self.rev:.10} again"


@dataclass(frozen=True)
class InScorer:
    """One of the scorer's events (:data:`ScorerEvent`) inside a judgment; ``again``: in its
    re-measurement."""
    event: ScorerEvent
    again: bool = False

    def __str__(self) -> str:
        return f"  {'again: ' if self.again else ''}{self.event}"


@dataclass(frozen=True)
class ScorerTurnWaits:
    """``farm.isolate``: another judgment's scorer rounds run on this host; this one waits."""

    def __str__(self) -> str:
        return "farm.isolate: waiting for another judgment's scorer rounds"


JudgmentEvent = GateStarted | AccuracyVerdict | Remeasuring | InScorer | ScorerTurnWaits | SideEnded
