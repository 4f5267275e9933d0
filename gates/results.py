"""What ``kern test`` and ``kern bench`` found, as the loop decides on it.

``run_test`` and ``run_bench`` return a :class:`AccuracyResult` and a :class:`BenchResult`: the
facts the merge rule (``gates/rules/decision.py``), the ledger row and the CLI read, as typed
attributes, with the full report attached (``.report``: the JSON object ``--out`` writes, the
ledger's judgment files keep, and the report lines are printed from).

The report is the persisted form of a result, so a report dict (written by ``--out``, kept in
``runs/attempts/<n>/judgment-<k>.json``, or made by a stand-in gate) is parsed into the typed
form by :meth:`AccuracyResult.of` / :meth:`BenchResult.of`; the paths of keys into the report are
read here and nowhere else in the loop.

A judgment's A/B per bucket is read once, here: :class:`ScorerView` (its buckets each a
:class:`BucketView`) is made from the scorer's report (:meth:`ScorerView.of`) or from what a
ledger row keeps (:meth:`ScorerView.of_ledger`), and ``kern show``, the journey's page and its
exports read it (and ``kern bench``'s lines, harness/terminal.py). Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

# how a side process may end (gates/launch/process.py); "not run": the gate never started it
OK, NOT_RUN, TIMEOUT, TAMPERED = "ok", "not run", "timeout", "tampered"
DISK_FULL = "disk full"  # the side's write failed and its folder's disk had no room (gates/launch/disk.py)
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
    outcome_a: str = OK  # how main's recording ended (gates/launch/process.py's kinds)
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

    outcome: str  # "ok", or how a side ended (gates/launch/process.py's kinds)
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
    def view(self) -> "ScorerView":
        """What it measured per bucket (:class:`ScorerView`), read from its report."""
        return replace(ScorerView.of(self.report) or ScorerView(), outcome=self.outcome, error=self.error)

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


# ----------------------------------------------------------------------------- the A/B per bucket
def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def nested(d, *keys):
    """``d[k1][k2]...``, a bucket key as given or as the string JSON keeps; None where absent."""
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k) if k in d else d.get(str(k))
    return d


@dataclass(frozen=True)
class BucketTimes:
    """One side's replays at one bucket: the median step (ms) and, from a scorer's report, its
    spread (p10, p90, cv), its replays' count and each rank's median (several ranks a side)."""

    median: float
    p10: float | None = None
    p90: float | None = None
    cv: float | None = None
    n: int | None = None
    ranks: tuple[float, ...] = ()

    @classmethod
    def of(cls, d, ranks=None) -> "BucketTimes | None":
        """A report's ``analysis.sides.<k>.buckets.<b>`` (None when it holds no median)."""
        median = _number(nested(d, "median"))
        if median is None:
            return None
        n = nested(d, "n")
        return cls(median, _number(nested(d, "p10")), _number(nested(d, "p90")), _number(nested(d, "cv")),
                   n if isinstance(n, int) and not isinstance(n, bool) else None,
                   tuple(x for x in map(_number, ranks) if x is not None)
                   if isinstance(ranks, (list, tuple)) else ())


@dataclass(frozen=True)
class BucketView:
    """One bucket of one A/B: its weight in the score, each side's times, B − A with its 95 %
    interval and the roofline floor. With paired replays (gates/rules/stats.py ``paired_delta``)
    B − A is A's median × (B/A − 1), B/A the median over the pairs of B's time over A's, so
    :attr:`ratio` is B − A's own estimate read back, its interval likewise; unpaired, B − A is
    B's median − A's median and there is no ratio."""

    rows: int
    weight: float | None = None
    a: BucketTimes | None = None
    b: BucketTimes | None = None
    delta_ms: float | None = None
    low: float | None = None
    high: float | None = None
    floor_ms: float | None = None  # the bytes it must move at the run's read bandwidth
    paired: bool = False

    @property
    def a_ms(self) -> float | None:
        return None if self.a is None else self.a.median

    @property
    def b_ms(self) -> float | None:
        return None if self.b is None else self.b.median

    def _ratio(self, ms: float | None) -> float | None:
        return 1 + ms / self.a_ms if self.paired and ms is not None and self.a_ms else None

    @property
    def ratio(self) -> float | None:
        """B/A, the paired median ratio the scorer estimated (None: unpaired or unknown)."""
        return self._ratio(self.delta_ms)

    @property
    def ratio_interval(self) -> tuple[float | None, float | None]:
        """B/A's 95 % interval (the interval of B − A over A's median, plus one)."""
        return self._ratio(self.low), self._ratio(self.high)

    @property
    def change_pct(self) -> float | None:
        """B − A as a share of A's median (%)."""
        return self.delta_ms / self.a_ms * 100 if self.delta_ms is not None and self.a_ms else None

    def pct_of_floor(self, ms: float | None) -> float | None:
        """% of the floor a time reaches: floor / time (100 % is the floor)."""
        if self.floor_ms is None or not ms:
            return None
        return self.floor_ms / ms * 100

    def to_dict(self) -> dict:
        def spread(t):
            return None if t is None or t.p10 is None else [t.p10, t.p90]

        return {"rows": self.rows, "weight": self.weight, "a_ms": self.a_ms, "b_ms": self.b_ms,
                "a_p10_p90": spread(self.a), "b_p10_p90": spread(self.b), "ratio": self.ratio,
                "ratio_ci": list(self.ratio_interval), "delta_ms": self.delta_ms,
                "ci_ms": [self.low, self.high], "change_pct": self.change_pct,
                "floor_ms": self.floor_ms, "a_pct_of_floor": self.pct_of_floor(self.a_ms),
                "b_pct_of_floor": self.pct_of_floor(self.b_ms)}


def check_name(c) -> str:
    """A failed check's name (its record's ``check``; a record of another form as it is)."""
    return str(c.get("check", c)) if isinstance(c, dict) else str(c)


@dataclass(frozen=True)
class ScorerView:
    """One A/B of a judgment as every reader shows it: how the scorer ended, its buckets, each
    side's score and checks, the score's B − A (the buckets' weighted as the score weights them)
    with its interval, share of A's score, noise band, class and guard; and the independent
    re-measurement's own view. ``from_judgment``: every number from the scorer's report (a
    judgment file's ``bench``); else from a ledger row, which keeps the medians and the score's
    B − A only (no replay pairs: no per-bucket B − A)."""

    outcome: str | None = None  # "ok", or how a side ended; None: not recorded
    error: str | None = None
    wall_s: float | None = None
    from_judgment: bool = True
    paired: bool = False
    buckets: tuple[BucketView, ...] = ()
    sides: dict = field(default_factory=dict)  # {"A" | "B": SideScore}, from a report
    delta_ms: float | None = None
    low: float | None = None
    high: float | None = None
    delta_pct: float | None = None
    band_ms: float | None = None
    classification: str | None = None
    guard: str | None = None
    guard_ok: bool | None = None
    reverify: "ScorerView | None" = None

    @property
    def score_a(self) -> float | None:
        return None if "A" not in self.sides else _number(self.sides["A"].score)

    @property
    def score_b(self) -> float | None:
        return None if "B" not in self.sides else _number(self.sides["B"].score)

    @property
    def measured(self) -> bool:
        """Whether it holds any number (a bucket's time or the score's B − A)."""
        return bool(self.buckets) or self.delta_ms is not None

    @property
    def counted(self) -> "ScorerView":
        """The A/B a row counts: the re-measurement where it measured a change, else this one."""
        again = self.reverify
        return again if again is not None and again.delta_ms is not None else self

    @classmethod
    def of(cls, report: "BenchResult | dict | None") -> "ScorerView | None":
        """The view of a scorer's report (its JSON form, or a BenchResult's; a judgment file's
        ``bench``, or its ``reverify``), every number as the scorer computed it; None for no
        report. A key a report lacks (one written by an older version, or edited) is None."""
        report = report_of(report)
        if not isinstance(report, dict):
            return None
        sides_raw = nested(report, "analysis", "sides")
        sides_raw = sides_raw if isinstance(sides_raw, dict) else {}
        ab = nested(report, "analysis", "ab")
        ab = ab if isinstance(ab, dict) else {}
        buckets = report.get("buckets") if isinstance(report.get("buckets"), list) else []
        weights = report.get("weights")
        weights = weights if isinstance(weights, list) and len(weights) == len(buckets) else [None] * len(buckets)
        paired = bool(ab.get("paired") or nested(ab, "delta", "paired"))
        bw = _number(nested(report, "bandwidth", "Bps"))
        ranks = report.get("rank_medians") if isinstance(report.get("rank_medians"), dict) else {}
        rows = []
        for bk, w in zip(buckets, weights):
            d = nested(ab, "delta", "buckets", bk)
            d = d if isinstance(d, dict) else {}
            nbytes = _number(nested(report, "cost", bk, "bytes"))
            rows.append(BucketView(
                int(bk), _number(w),
                BucketTimes.of(nested(sides_raw, "A", "buckets", bk), nested(ranks, "A", bk)),
                BucketTimes.of(nested(sides_raw, "B", "buckets", bk), nested(ranks, "B", bk)),
                _number(d.get("delta")), _number(d.get("low")), _number(d.get("high")),
                nbytes / bw * 1e3 if nbytes is not None and bw else None, paired))
        sides = {k: SideScore(score=_number(s.get("score")),
                              medians={r.rows: t.median for r in rows
                                       if (t := r.a if k == "A" else r.b) is not None},
                              failed_checks=tuple(s.get("failed_checks") or ()),
                              graph_matches_eager=s.get("graph_matches_eager"))
                 for k, s in sorted(sides_raw.items()) if isinstance(s, dict)}
        guard_ok = ab.get("guard_ok")
        return cls(
            outcome=report.get("outcome") if isinstance(report.get("outcome"), str) else None,
            error=report.get("error"), wall_s=_number(report.get("wall_s")), from_judgment=True,
            paired=paired, buckets=tuple(rows), sides=sides,
            delta_ms=_number(nested(ab, "delta", "delta")), low=_number(nested(ab, "delta", "low")),
            high=_number(nested(ab, "delta", "high")), delta_pct=_number(ab.get("delta_pct")),
            band_ms=_number(ab.get("band")),
            classification=ab.get("classification") if isinstance(ab.get("classification"), str) else None,
            guard=ab.get("guard") if isinstance(ab.get("guard"), str) else None,
            guard_ok=guard_ok if isinstance(guard_ok, bool) else None,
            reverify=cls.of(report.get("reverify")))

    @classmethod
    def of_ledger(cls, delta_ms=None, low=None, high=None, delta_pct=None, medians_a=None,
                  medians_b=None, reverify: "ScorerView | None" = None, **score) -> "ScorerView":
        """What a ledger row keeps of an A/B (its columns, or its gate summary's ``reverify``):
        each bucket's medians (keyed by the bucket, as a string or not) and the score's B − A
        with its interval; ``score``: ``classification``, ``band_ms`` when kept."""
        ma = medians_a if isinstance(medians_a, dict) else {}
        mb = medians_b if isinstance(medians_b, dict) else {}
        keys = sorted({int(k) for k in (*ma, *mb) if str(k).lstrip("-").isdigit()})

        def times(m, k):
            v = _number(m.get(k, m.get(str(k))))
            return None if v is None else BucketTimes(v)

        return cls(from_judgment=False, paired=True,
                   buckets=tuple(BucketView(k, a=times(ma, k), b=times(mb, k), paired=True) for k in keys),
                   delta_ms=_number(delta_ms), low=_number(low), high=_number(high),
                   delta_pct=_number(delta_pct), band_ms=_number(score.get("band_ms")),
                   classification=score.get("classification"), reverify=reverify)

    def or_ledger(self, ledger: "ScorerView | None") -> "ScorerView":
        """This view (a report's), or the ledger row's where the report measured no A/B and the
        row did; the re-measurement likewise (the report's, else the row's)."""
        if ledger is None:
            return self
        first = ledger if self.delta_ms is None and not any(
            b.delta_ms is not None for b in self.buckets) and ledger.measured else self
        again = self.reverify
        if again is None or (again.delta_ms is None and ledger.reverify is not None):
            again = ledger.reverify
        return replace(first, reverify=again)

    def to_dict(self) -> dict:
        """The JSON form ``kern show --json`` and the journey's JSON print (keys stable)."""
        return {"outcome": self.outcome, "error": self.error, "wall_s": self.wall_s,
                "from_judgment": self.from_judgment, "paired": self.paired,
                "buckets": [b.to_dict() for b in self.buckets],
                "score": {"a_ms": self.score_a, "b_ms": self.score_b, "delta_ms": self.delta_ms,
                          "ci_ms": [self.low, self.high], "delta_pct": self.delta_pct},
                "band_ms": self.band_ms, "classification": self.classification,
                "guard": self.guard, "guard_ok": self.guard_ok,
                "sides": {k: {"score_ms": _number(s.score),
                              "failed_checks": [check_name(c) for c in s.failed_checks],
                              "graph_matches_eager": s.graph_matches_eager}
                          for k, s in sorted(self.sides.items())},
                "reverify": None if self.reverify is None else self.reverify.to_dict()}
