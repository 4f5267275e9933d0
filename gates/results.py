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
                   wall_s=res.get("wall_s"), report=res)


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
                   secrets=res.get("secrets"), wall_s=res.get("wall_s"), report=res)


def report_of(res: "AccuracyResult | BenchResult | dict | None") -> dict | None:
    """The JSON form of a result (its report), whichever form it is in."""
    return res.report if isinstance(res, (AccuracyResult, BenchResult)) else res
