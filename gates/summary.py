"""What an attempt's ledger row keeps of its judgment: the gates up to the one that decided,
typed (:class:`GateSummary`), made from the decision (:func:`summarize`), stored as JSON in
the ledger's ``gate`` column and read by the journey, ``kern show`` and the git note.

The JSON form is the one the ledger has held since its first rows (``to_dict`` writes it,
``from_dict`` reads it), so rows written before this module load and report as they did:
``{"scope": "ok" | [problems], "accuracy": {...}, "bench": {...}, "guard": {...},
"reverify": {...}, "times": {...}, "conflict": str}``, and since issue 34 ``"last_words":
{"side", "kind", "lines", "log"}`` of a side that ended badly. Every field is optional (None:
not recorded); a section that is not an object and a key no version wrote are ignored, as the
readers of the dict ignored them. Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import ClassVar

from .results import NOT_RUN, OK, AccuracyResult, BenchResult, LastWords, ScorerView
from .rules.decision import BY_ACCURACY, BY_CHECKS, BY_SCOPE, BY_SCORER, Decision, decide


def _plain(x):
    """``x`` as JSON holds it: tuples become lists, at any depth."""
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


class _Section:
    """A section of the summary: its JSON object holds the fields that are not None."""

    # field name -> how its JSON value becomes the field's (tuples for lists)
    LOAD: ClassVar[dict] = {}

    def to_dict(self) -> dict:
        """The fields that are not None, keys sorted (as the ledger's column holds them)."""
        return dict(sorted((f.name, _plain(v)) for f in fields(self)
                           if (v := getattr(self, f.name)) is not None))

    @classmethod
    def from_dict(cls, d):
        """The section of JSON object ``d``; None when ``d`` is not an object."""
        if not isinstance(d, dict):
            return None
        return cls(**{f.name: cls.LOAD.get(f.name, _same)(d[f.name]) for f in fields(cls)
                      if d.get(f.name) is not None})


def _same(v):
    return v


def _strings(v) -> tuple[str, ...]:
    return tuple(str(x) for x in v) if isinstance(v, (list, tuple)) else (str(v),)


def _tuple(v) -> tuple | None:
    return tuple(v) if isinstance(v, (list, tuple)) else None


def _records(v) -> tuple[dict, ...]:
    return tuple(c for c in v if isinstance(c, dict)) if isinstance(v, (list, tuple)) else ()


@dataclass(frozen=True)
class AccuracySummary(_Section):
    """The accuracy gate's verdict and its first reasons (the decisive one first)."""

    verdict: str | None = None
    reasons: tuple[str, ...] | None = None
    tag: str | None = None  # one word for the first reason; rows of early versions only
    LOAD: ClassVar[dict] = {"reasons": _strings}


@dataclass(frozen=True)
class ScorerSummary(_Section):
    """The scorer (JSON key ``bench``), in one of three forms by what decided: how it ended
    when not ok (``outcome``, ``error``); the failed checks (the first four) and whether its
    graph matched the eager step; or how it classed the change against its noise band."""

    outcome: str | None = None
    error: str | None = None
    checks: tuple[dict, ...] | None = None  # each {"check": name, "why": ..., ...}
    graph_matches_eager: bool | None = None
    classification: str | None = None  # faster | slower | within noise
    band_ms: float | None = None
    LOAD: ClassVar[dict] = {"checks": _records}


@dataclass(frozen=True)
class GuardSummary(_Section):
    """The guard: whether it held, its line, and the bucket that got worst (by how much)."""

    ok: bool | None = None
    text: str | None = None
    rows: int | None = None
    worst_pct: float | None = None  # of main's median at ``rows``; negative: faster


@dataclass(frozen=True)
class ReverifySummary(_Section):
    """The independent re-measurement of a large gain, beside the first one's numbers: how it
    ended, and when ok what it measured (medians keyed by the bucket as a string)."""

    outcome: str | None = None
    error: str | None = None
    classification: str | None = None
    delta_ms: float | None = None
    ci: tuple | None = None  # (low, high) of delta_ms
    delta_pct: float | None = None
    band_ms: float | None = None
    medians_a: dict | None = None
    medians_b: dict | None = None
    checks: tuple[str, ...] | None = None  # the names of its failed checks
    processes: dict | None = None
    secrets: dict | None = None
    hidden: dict | None = None
    LOAD: ClassVar[dict] = {"ci": _tuple, "checks": _tuple}

    def view(self) -> ScorerView | None:
        """What it measured, as every reader shows an A/B (None: it measured no change)."""
        if self.outcome not in (None, OK) or not isinstance(self.delta_ms, (int, float)) \
                or isinstance(self.delta_ms, bool):
            return None
        lo, hi = (tuple(self.ci or ()) + (None, None))[:2]
        return ScorerView.of_ledger(self.delta_ms, lo, hi, self.delta_pct, self.medians_a,
                                    self.medians_b, classification=self.classification,
                                    band_ms=self.band_ms)


@dataclass(frozen=True)
class TimesSummary(_Section):
    """The judgment's seconds (gates/rules/phases.py): each gate's wall and the whole judgment's;
    the phases themselves are in its file (runs/attempts/<n>/judgment-<k>.json)."""

    accuracy_s: float | None = None
    scorer_s: float | None = None
    remeasure_s: float | None = None
    total_s: float | None = None
    compile_main_s: float | None = None  # main's compile side, part of accuracy_s (once per main)


@dataclass(frozen=True)
class GateSummary:
    """An attempt's gates as its ledger row keeps them (module docstring)."""

    scope_problems: tuple[str, ...] | None = None  # (): the scope gate passed; None: not run
    accuracy: AccuracySummary | None = None
    scorer: ScorerSummary | None = None
    guard: GuardSummary | None = None
    reverify: ReverifySummary | None = None
    conflict: str | None = None  # why it could not be put onto main (rebase, trial merge)
    detail: str | None = None  # a short line the journey shows as it is
    last_words: LastWords | None = None  # the side whose ending decided, in its own words
    times: TimesSummary | None = None  # what judging it took

    def to_dict(self) -> dict:
        """The JSON object the ledger's column holds, keys sorted (as it stores them)."""
        out = {}
        if self.scope_problems is not None:
            out["scope"] = list(self.scope_problems) if self.scope_problems else "ok"
        for key, section in (("accuracy", self.accuracy), ("bench", self.scorer),
                             ("guard", self.guard), ("reverify", self.reverify), ("times", self.times)):
            if section is not None:
                out[key] = section.to_dict()
        if self.conflict is not None:
            out["conflict"] = self.conflict
        if self.detail is not None:
            out["detail"] = self.detail
        if self.last_words is not None:
            out["last_words"] = self.last_words.to_dict()
        return dict(sorted(out.items()))

    @classmethod
    def from_dict(cls, d) -> "GateSummary | None":
        """The summary of the ledger column's JSON ``d``; None for None (no gate recorded).
        Anything else that is not an object is an empty summary, as its readers took it."""
        if d is None:
            return None
        if not isinstance(d, dict):
            return cls()
        scope = d.get("scope")
        text = {k: d[k] if isinstance(d.get(k), str) else None for k in ("conflict", "detail")}
        return cls(scope_problems=None if scope is None else () if scope == "ok" else _strings(scope),
                   accuracy=AccuracySummary.from_dict(d.get("accuracy")),
                   scorer=ScorerSummary.from_dict(d.get("bench")),
                   guard=GuardSummary.from_dict(d.get("guard")),
                   reverify=ReverifySummary.from_dict(d.get("reverify")),
                   last_words=LastWords.from_dict(d.get("last_words")),
                   times=TimesSummary.from_dict(d.get("times")), **text)


def reverify_summary(again: "BenchResult | dict") -> ReverifySummary:
    """Pure: what the row keeps of the re-measurement (beside the first's numbers)."""
    again = BenchResult.of(again)
    if again.outcome != OK:
        return ReverifySummary(outcome=again.outcome, error=again.error)
    ab, sa, sb = again.ab, again.a, again.b
    return ReverifySummary(
        outcome="ok", classification=ab.classification, delta_ms=ab.delta_ms, ci=(ab.low, ab.high),
        delta_pct=ab.delta_pct, band_ms=ab.band_ms,
        medians_a={str(b): m for b, m in sa.medians.items()},
        medians_b={str(b): m for b, m in sb.medians.items()},
        checks=tuple(c.get("check") for c in sb.failed_checks), processes=again.processes,
        secrets=again.secrets, hidden=again.hidden)


def decided(scope, test: AccuracyResult | None, bench: BenchResult | None) -> tuple[Decision, "GateSummary"]:
    """Pure: the merge rule over a judgment's results (``scope``: the scope gate's
    ``ScopeResult``) and what the ledger row keeps of them."""
    d = decide(scope.ok, test, bench)
    return d, summarize(d, scope.problems, test, bench)


def summarize(d: Decision, scope_problems, test: AccuracyResult | None,
              bench: BenchResult | None) -> GateSummary:
    """Pure: what the ledger row keeps of the gates up to the one that decided ``d``
    (gates/rules/decision.py's ``decide`` over the same results)."""
    if d.by == BY_SCOPE:
        return GateSummary(scope_problems=tuple(scope_problems))
    gate = GateSummary(scope_problems=(), accuracy=None if test is None else AccuracySummary(
        verdict=test.verdict, reasons=tuple(test.reasons[:6])))
    if d.by == BY_ACCURACY:
        return replace(gate, last_words=test.last_words[0] if test is not None and test.last_words else None)
    if d.by == BY_SCORER:
        return replace(gate, scorer=ScorerSummary(outcome=bench.outcome if bench else NOT_RUN,
                                                  error=bench.error if bench else None),
                       last_words=None if bench is None else bench.last_words or (
                           bench.reverify.last_words if bench.reverify else None))
    again = None if bench.reverify is None else reverify_summary(bench.reverify)
    if d.by == BY_CHECKS:
        return replace(gate, reverify=again, last_words=bench.reverify.last_words if again else None,
                       scorer=ScorerSummary(
            checks=tuple(d.checks[:4]), graph_matches_eager=bench.b.graph_matches_eager))
    sa, ab = bench.a, bench.ab
    worst = max(bench.buckets, key=lambda b: ab.bucket_deltas[b] / sa.medians[b])
    return replace(gate, reverify=again,
                   scorer=ScorerSummary(classification=ab.classification, band_ms=ab.band_ms),
                   guard=GuardSummary(ok=ab.guard_ok, text=ab.guard, rows=worst,
                                      worst_pct=ab.bucket_deltas[worst] / sa.medians[worst] * 100))
