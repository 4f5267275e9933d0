"""What ``kern test`` and ``kern bench`` found, as the loop decides on it.

``run_test`` and ``run_bench`` return a :class:`AccuracyResult` and a :class:`BenchResult`: the
facts the merge rule (``gates/decision.py``), the ledger row and the CLI read, as typed
attributes, with the full report attached (``.report``: the JSON object ``--out`` writes, the
ledger's judgment files keep, and the report lines are printed from).

The report is the persisted form of a result, so a report dict (written by ``--out``, kept in
``runs/attempts/<n>/judgment-<k>.json``, or made by a stand-in gate) is parsed into the typed
form by :meth:`AccuracyResult.of` / :meth:`BenchResult.of`; the paths of keys into the report are
read here and nowhere else in the loop. Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

# how a side process may end (gates/launch.py); "not run": the gate never started it
OK, NOT_RUN, TIMEOUT, TAMPERED = "ok", "not run", "timeout", "tampered"
DISK_FULL = "disk full"  # the side's write failed and its folder's disk had no room (gates/disk.py)
# kinds that say a side did not end badly (or never ran)
_NOT_FAILED = (OK, NOT_RUN, "not needed", None)


def last_lines(tail: str, n: int = 4, width: int = 200) -> tuple[str, ...]:
    """Pure: the last ``n`` non-empty lines of a log's tail, each cut to ``width``."""
    lines = [ln.rstrip() for ln in (tail or "").splitlines() if ln.strip()]
    return tuple(ln[:width] for ln in lines[-n:])


@dataclass(frozen=True)
class LastWords:
    """A side that ended badly, in its own words: which side (``"A record"``, ``"B replay"``,
    ``"A noise"``; the scorer's ``"side A"``, ``"side B"``), how it ended, the last lines of
    its log and the log's path. The ledger row keeps them (``gates.summary``), ``kern show``,
    the journey and the progress lines show them."""

    side: str
    kind: str
    lines: tuple[str, ...] = ()
    log: str | None = None

    @classmethod
    def of(cls, side: str, kind: str | None, tail: str, log=None) -> "LastWords | None":
        """The words of a side that ended with ``kind`` (None when it did not fail)."""
        if kind in _NOT_FAILED:
            return None
        return cls(side, kind, last_lines(tail), None if log is None else str(log))

    def to_dict(self) -> dict:
        return {"side": self.side, "kind": self.kind, "lines": list(self.lines), "log": self.log}

    @classmethod
    def from_dict(cls, d) -> "LastWords | None":
        if not isinstance(d, dict) or not d.get("side"):
            return None
        lines = d.get("lines")
        return cls(str(d["side"]), str(d.get("kind") or "?"),
                   tuple(str(x) for x in lines) if isinstance(lines, (list, tuple)) else (),
                   d.get("log") if isinstance(d.get("log"), str) else None)

    @property
    def last(self) -> str:
        """Its last line ('' when the log said nothing)."""
        return self.lines[-1] if self.lines else ""

    def __str__(self) -> str:
        said = f": {self.last}" if self.last else ""
        return f"{self.side} ended with {self.kind}{said}" + (f" (log {self.log})" if self.log else "")


@dataclass(frozen=True)
class AccuracyResult:
    """``kern test REV --vs BASE``: the accuracy gate's verdict and how its sides ended."""

    verdict: str  # "PASS bit-identical", "FAIL", "INCONCLUSIVE", ...
    reasons: tuple[str, ...]  # the verdict's reasons, the decisive one first
    outcome_a: str = OK  # how main's recording ended (gates/launch.py's kinds)
    outcome_b: str | None = OK  # how the candidate's replay ended; "not run" when A failed
    outcome_noise: str = "not needed"  # A's repeat and band passes
    # the bar the scorer holds the timed replays' outputs to (``verdict.judge_timed``): the
    # verdict and the evidence it weighed (band, noise, noise_tap, the logits' rows) and the
    # ops the change touched
    claim: dict = field(default_factory=dict)
    hidden: dict | None = None  # the judgment's hidden inputs (Hidden.to_dict())
    exit_code: int | None = None  # kern test's: PASS 0, FAIL 1, INCONCLUSIVE 2
    wall_s: float | None = None
    report: dict = field(default_factory=dict)
    # each side that ended badly, in the order they ran (the first decided)
    last_words: tuple[LastWords, ...] = ()

    @property
    def passed(self) -> bool:
        return self.verdict.startswith("PASS")

    @classmethod
    def of(cls, res: "AccuracyResult | dict") -> "AccuracyResult":
        """``res`` as a AccuracyResult: itself, or its report parsed."""
        if isinstance(res, AccuracyResult):
            return res
        ev = res.get("evidence") or {}
        claim = {"verdict": res["verdict"], "band": ev.get("band"), "noise": ev.get("noise"),
                 "noise_tap": ev.get("noise_tap"), "rows": (ev.get("logits") or {}).get("rows"),
                 # the ops main's side puts on the reference for the scorer's band (None: all)
                 "touched_ops": res.get("touched_ops")}
        return cls(verdict=res["verdict"], reasons=tuple(res["reasons"]),
                   outcome_a=ev.get("outcome_a", OK), outcome_b=ev.get("outcome_b"),
                   outcome_noise=ev.get("outcome_noise", "not needed"), claim=claim,
                   hidden=res.get("hidden"), exit_code=res.get("exit_code"),
                   wall_s=res.get("wall_s"), report=res, last_words=_accuracy_words(res, ev))


def _accuracy_words(res: dict, ev: dict) -> tuple[LastWords, ...]:
    """The report's ``last_words``; a report written before them: the tails it kept."""
    if isinstance(res.get("last_words"), list):
        return tuple(w for w in map(LastWords.from_dict, res["last_words"]) if w)
    old = (LastWords.of("A record", ev.get("outcome_a"), res.get("a_log_tail") or "", res.get("a_dir")),
           LastWords.of("B replay", ev.get("outcome_b"), res.get("b_log_tail") or "", res.get("b_dir")))
    return tuple(w for w in old if w)


@dataclass(frozen=True)
class SideScore:
    """One side of a scorer run: its score, its per-bucket medians and what its checks found."""

    score: float  # ms, the weighted mean of the medians
    medians: dict  # {bucket (int): median ms}, in the buckets' order
    failed_checks: tuple[dict, ...]  # each {"check": name, "why": ..., ...}
    graph_matches_eager: bool


@dataclass(frozen=True)
class Comparison:
    """B against A (main): the paired delta, its interval, the noise band and the guard."""

    delta_ms: float  # score B - A
    low: float  # the delta's interval
    high: float
    delta_pct: float  # of A's score
    band_ms: float  # A-vs-A noise band the interval is held to
    classification: str  # "faster" | "slower" | "within noise"
    guard_ok: bool
    guard: str  # the guard's one line
    bucket_deltas: dict  # {bucket (int): B - A ms}


@dataclass(frozen=True)
class BenchResult:
    """``kern bench REV [--vs BASE]``: how the run ended and, when it ran, what it measured."""

    outcome: str  # "ok", or how a side ended (gates/launch.py's kinds)
    error: str | None = None
    buckets: tuple[int, ...] = ()
    sides: dict = field(default_factory=dict)  # {"A" | "B": SideScore}, when outcome is ok
    ab: Comparison | None = None  # with a base, when outcome is ok
    # the independent re-measurement of a large gain (harness/pipeline.py), when one ran
    reverify: "BenchResult | None" = None
    hidden: dict | None = None
    processes: dict | None = None  # side processes opened per side
    secrets: dict | None = None  # the run's own seeds, told to the sides only when they ran
    wall_s: float | None = None
    report: dict = field(default_factory=dict)
    last_words: LastWords | None = None  # the side that ended the run badly

    @property
    def a(self) -> SideScore | None:
        return self.sides.get("A")

    @property
    def b(self) -> SideScore | None:
        return self.sides.get("B")

    def with_reverify(self, again: "BenchResult") -> "BenchResult":
        """This result with its re-measurement, also in the report (key ``reverify``)."""
        return replace(self, reverify=again, report={**self.report, "reverify": again.report})

    @classmethod
    def of(cls, res: "BenchResult | dict") -> "BenchResult":
        """``res`` as a BenchResult: itself, or its report parsed. A report the scorer wrote
        holds every key; one a stand-in wrote may hold only what its reader needs (the
        attributes it lacks are None or empty)."""
        if isinstance(res, BenchResult):
            return res
        an = res.get("analysis") or {}
        sides = {k: SideScore(score=s.get("score"),
                              medians={int(b): v["median"] for b, v in s["buckets"].items()},
                              failed_checks=tuple(s.get("failed_checks") or ()),
                              graph_matches_eager=s.get("graph_matches_eager"))
                 for k, s in (an.get("sides") or {}).items()}
        ab = an.get("ab")
        comparison = None if ab is None else Comparison(
            delta_ms=ab["delta"]["delta"], low=ab["delta"]["low"], high=ab["delta"]["high"],
            delta_pct=ab["delta_pct"], band_ms=ab["band"], classification=ab["classification"],
            guard_ok=ab.get("guard_ok"), guard=ab.get("guard"),
            bucket_deltas={int(b): d["delta"] for b, d in (ab["delta"].get("buckets") or {}).items()})
        again = res.get("reverify")
        return cls(outcome=res.get("outcome", NOT_RUN), error=res.get("error"),
                   buckets=tuple(int(b) for b in res.get("buckets") or ()), sides=sides,
                   ab=comparison, reverify=None if again is None else cls.of(again),
                   hidden=res.get("hidden"), processes=res.get("processes"),
                   secrets=res.get("secrets"), wall_s=res.get("wall_s"), report=res,
                   last_words=LastWords.from_dict(res.get("last_words")) or LastWords.of(
                       "scorer", res.get("outcome", NOT_RUN), res.get("error") or "", res.get("log")))


def report_of(res: "AccuracyResult | BenchResult | dict | None") -> dict | None:
    """The JSON form of a result (its report), whichever form it is in."""
    return res.report if isinstance(res, (AccuracyResult, BenchResult)) else res
