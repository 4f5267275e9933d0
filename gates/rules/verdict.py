"""The accuracy gate's decisions: pure functions over what the two sides measured.

``logits.logit_stats`` compares two sets of logits row by row; ``tap_diff`` compares two free passes
call by call; ``judge`` turns all evidence into a verdict (first match wins):

    FAIL                    crash, illegal memory access, timeout, NaN/Inf, an output not
                            fully written, writes outside declared outputs, a confident
                            argmax flip, KL over the limit, reference tolerance exceeded,
                            a protected file changed, ranks of the candidate that disagree
    PASS bit-identical      every op output, state write and logits row equal byte for byte
    PASS value-identical    equal except +0 / -0
    PASS logit evidence     KL within kl_pass, flips only near-ties (and few), cut-local and
                            reference checks clean
    PASS within noise floor B stays inside band_factor x the floor: the larger of A vs A (if
                            A is not reproducible) and A vs A-with-the-touched-ops-on-the-
                            reference (the model's own sensitivity to rounding)
    INCONCLUSIVE            otherwise

Exit codes: PASS 0, FAIL 1, INCONCLUSIVE 2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..logits import merge_logit_stats
from ..settings import Thresholds, Tolerance

EXIT = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 2}


@dataclass
class Verdict:
    name: str  # e.g. "PASS bit-identical"
    reasons: list = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT[self.name.split()[0]]


# ------------------------------------------------------------------ tap
def tap_diff(a_pass: dict, b_pass: dict) -> dict:
    """Compare two free passes call by call: which ops differ (raw / value), defects of B."""
    calls = differ_raw = differ_value = 0
    first = None
    by_op: dict = {}
    sequence = []
    unwritten, nonfinite, outside = [], [], []
    for key, run in a_pass["runs"].items():
        brun = b_pass["runs"].get(key)
        if brun is None:
            sequence.append(f"{key}: B did not run")
            continue
        if len(brun["calls"]) != len(run["calls"]):
            sequence.append(f"{key}: A made {len(run['calls'])} op calls, B {len(brun['calls'])}")
        for x, y in zip(run["calls"], brun["calls"]):
            calls += 1
            where = f"{key} {y['site']}"
            _own_defects(y, where, unwritten, outside)
            for name, n in y.get("nonfinite", {}).items():
                base_n = x.get("nonfinite", {}).get(name, 0)
                if n > base_n:  # some outputs hold -inf by contract (indexer padding)
                    nonfinite.append(f"{y['op']}.{name} at {where}: {n} Inf where A has {base_n}")
            if x["op"] != y["op"] or x["site"] != y["site"]:
                sequence.append(f"{key} call {x['i']}: A ran {x['site']}, B ran {y['site']}")
                break
            raw = x["outputs"] != y["outputs"] or x["state"] != y["state"]
            val = _values(x) != _values(y)
            if raw:
                differ_raw += 1
                op = by_op.setdefault(y["op"], {"raw": 0, "value": 0, "calls": 0})
                op["raw"] += 1
                op["value"] += int(val)
                if first is None:
                    first = where
            if val:
                differ_value += 1
            by_op.setdefault(y["op"], {"raw": 0, "value": 0, "calls": 0})["calls"] += 1
    return {"calls": calls, "differ_raw": differ_raw, "differ_value": differ_value,
            "first_difference": first, "by_op": by_op, "sequence": sequence,
            "unwritten": unwritten, "nonfinite": nonfinite, "outside": outside, "compared": True}


def _own_defects(call: dict, where: str, unwritten: list, outside: list) -> None:
    for name, n in call["unwritten"].items():
        if n:
            unwritten.append(f"{call['op']}.{name} at {where}: {n} elements not written")
    for name in call.get("outside_changed", []):
        outside.append(f"{call['op']} wrote {name} outside its rows at {where}")


def own_defects(b_pass: dict) -> dict:
    """B's free pass alone, in ``tap_diff``'s shape, for a base on another layout: no call of B
    corresponds to one of A's (other shapes, other sums), so nothing is compared (``compared``
    False); B's own defects (outputs not written, writes outside its rows) still count.
    Infinities are not judged here (some outputs hold -inf by contract; only a base's count
    says how many): the logits' NaN/Inf check stands."""
    calls, unwritten, outside = 0, [], []
    for key, run in b_pass["runs"].items():
        for y in run["calls"]:
            calls += 1
            _own_defects(y, f"{key} {y['site']}", unwritten, outside)
    return {"calls": calls, "differ_raw": 0, "differ_value": 0, "first_difference": None,
            "by_op": {}, "sequence": [], "unwritten": unwritten, "nonfinite": [],
            "outside": outside, "compared": False}


def _values(call: dict) -> tuple:
    return ({k: v[1] for k, v in call["outputs"].items()},
            {k: v[1] for k, v in call["state"].items()})


# ------------------------------------------------------------------ cut-local + reference
def local_summary(pinned: dict | None, th: Thresholds | None) -> dict:
    """Per op: worst cut-local difference vs A and vs the reference; defects; tolerance breaks
    (each op's tolerance: ``th.tolerance(op)``; ``th`` None only where nothing was pinned)."""
    if not pinned:
        return {"ops": {}, "defects": [], "reference_breaks": [], "diverged": []}
    ops: dict = {}
    defects, breaks, diverged = [], [], []
    for c in pinned["calls"]:
        if "diverged" in c:
            d = c["diverged"]
            diverged.append(f"rows {d['rows']}: pinning stopped at call {d['call']} ({d['b']}): {d['why']}")
            continue
        where = f"{c['site']} (rows {c['rows']})"
        if c["wrote_inputs"]:
            defects.append(f"{c['op']} wrote its inputs {c['wrote_inputs']} at {where}")
        if c["guard_broken"]:
            defects.append(f"{c['op']} wrote past the end of {c['guard_broken']} at {where}")
        if c["outside_changed"]:
            defects.append(f"{c['op']} wrote {c['outside_changed']} outside its rows at {where}")
        o = ops.setdefault(c["op"], {"calls": 0, "differing": 0, "max_ulp": 0.0, "rel_rms": 0.0,
                                     "nan": 0, "unwritten": 0, "ref_rel_rms": 0.0,
                                     "ref_max_ulp": 0.0, "worst_site": None})
        o["calls"] += 1
        for name, d in {**c["outputs"], **c["state"]}.items():
            if d.get("written_rows_differ"):
                defects.append(f"{c['op']} wrote different {name} rows than A "
                               f"({d['b_rows']} vs {d['a_rows']}) at {where}")
                continue
            o["differing"] += d["differing"]
            o["nan"] += d["nan"] + d["inf"]
            o["unwritten"] += d.get("unwritten", 0)
            if d["rel_rms"] > o["rel_rms"]:
                o["worst_site"] = where
            o["max_ulp"] = max(o["max_ulp"], d["max_ulp"])
            o["rel_rms"] = max(o["rel_rms"], d["rel_rms"])
        tol = th.tolerance(c["op"])
        for name, d in c["reference"].items():
            o["ref_rel_rms"] = max(o["ref_rel_rms"], d["rel_rms"])
            o["ref_max_ulp"] = max(o["ref_max_ulp"], d["max_ulp"])
            broke = _breaks(name, d, tol)
            if broke:
                breaks.append(f"{c['op']}.{name} at {where}: {broke}")
    return {"ops": ops, "defects": defects, "reference_breaks": breaks, "diverged": diverged}


def _breaks(name: str, d: dict, tol: Tolerance) -> str | None:
    if d["nan"] or d["inf"]:
        return f"NaN/Inf against the reference ({d['nan']} NaN, {d['inf']} Inf)"
    exact = tol.exact or tol.exact_output == name
    if exact and d["differing"]:
        return f"{d['differing']} of {d['numel']} elements differ, expected exact"
    frac = tol.max_differing_frac
    if frac is not None and not d.get("float", True) and d["differing"] > frac * max(1, d["numel"]):
        return f"{d['differing']} of {d['numel']} elements differ (> {frac:g} of them)"
    limit = tol.rel_rms
    if limit is not None and not exact and d["rel_rms"] > limit:
        return f"relative RMS {d['rel_rms']:.3g} > tolerance {limit:g}"
    return None


# ------------------------------------------------------------------ judge
def judge(ev: dict, th: Thresholds) -> Verdict:
    """``ev``: outcome_b, outcome_a, outcome_noise, protected_changed, same_setup, tap (tap_diff,
    or own_defects when A ran another layout), logits (logit_stats B vs A), noise (logit_stats
    A vs A2), noise_tap (tap_diff A vs A2), local (local_summary), ranks (``a_disagree`` /
    ``b_disagree``: the steps after which a side's ranks held different replicated bytes; the
    base's make the test INCONCLUSIVE, the candidate's FAIL it), cross_layout (None, or why
    only logits compare: no bit-identical or value-identical verdict then). ``th``: the
    thresholds of kern.yaml's test section."""
    r: list[str] = []
    if ev.get("protected_changed"):
        r.append("protected files changed: " + ", ".join(ev["protected_changed"]))
    if ev["outcome_a"] != "ok":
        return Verdict("INCONCLUSIVE", [f"the base side did not finish: {ev['outcome_a']}"])
    rk = ev.get("ranks") or {}
    if ev["outcome_b"] != "ok":
        r.append(f"candidate side ended: {ev['outcome_b']}")
        return Verdict("FAIL", r)
    if rk.get("a_disagree"):  # the base cannot be a reference: whoever owns it acts
        return Verdict("INCONCLUSIVE", [
            f"the base's {rk['a']['world']} ranks ended with different replicated bytes or "
            f"gathered logits after {_steps(rk['a_disagree'])} (expected every rank identical): "
            f"the base is not deterministic across ranks"])
    if rk.get("b_disagree"):
        r.append(f"the candidate's {rk['b']['world']} ranks ended with different replicated bytes "
                 f"or gathered logits after {_steps(rk['b_disagree'])} (expected every rank "
                 f"identical): its collectives or kernels are not deterministic across ranks")
    if not ev.get("same_setup", True):
        r.append("the candidate built different weights or state than the base "
                 "(protected generation changed)")
    tap, lg, local = ev["tap"], ev["logits"], ev.get("local") or local_summary(None, None)
    r += [f"output not fully written: {u}" for u in tap["unwritten"][:8]]
    r += [f"non-finite output: {u}" for u in tap["nonfinite"][:8]]
    r += [f"wrote outside its declared outputs: {u}" for u in tap["outside"][:8]]
    r += local["defects"][:8]
    if lg["nonfinite_rows"]:
        r.append(f"{lg['nonfinite_rows']} logits rows with NaN/Inf")
    noise_outcome = ev.get("outcome_noise", "not needed")
    if noise_outcome not in ("ok", "not needed"):
        if r:
            return Verdict("FAIL", r)
        # without A's repeat and band, a difference cannot be weighed: the environment acts
        return Verdict("INCONCLUSIVE", [f"the base side's noise passes did not finish: {noise_outcome}"])
    band = ev.get("band")  # A with the touched ops on the reference: the model's own sensitivity
    band_kl = band["kl_max"] if band else 0.0
    kl_limit = max(th.kl_fail, th.band_factor * band_kl)
    if lg["flips_confident"] and not (band and band["flips_confident"]):
        r.append(f"{lg['flips_confident']} confident argmax flip(s)")
    if lg["kl_max"] > kl_limit:
        r.append(f"KL(A||B) max {lg['kl_max']:.3g} > limit {kl_limit:.3g} "
                 f"(max of kl_fail and {th.band_factor:g} x the reference band)")
    r += [f"reference tolerance exceeded: {b}" for b in local["reference_breaks"][:8]]
    if lg["missing"]:
        r.append(f"candidate produced no logits for {lg['missing'][:4]}")
    if r:
        return Verdict("FAIL", r)
    v = _judge_values(ev, th, tap, lg, local, band, band_kl)
    if ev.get("cross_layout"):
        v.reasons.append(ev["cross_layout"])
    return v


def needs_noise(ev: dict, th: Thresholds) -> bool:
    """Pure: whether A's repeat and band passes could change the verdict on ``ev`` (evidence
    gathered without them). They only raise limits: the band lifts the KL limit above
    ``kl_fail`` and excuses confident flips it shows too, the floor admits 'PASS within noise
    floor'; no rule reads them to add a reason. So a verdict that is a PASS without them is the
    same PASS with them, and one that stays what it is under the most permissive noise A could
    measure (a FAIL for written-outside, unwritten or non-finite outputs, a reference
    tolerance exceeded) stays it under any: only the others need them (tested over every band)."""
    if ev.get("outcome_a") != "ok" or ev.get("outcome_b") != "ok":
        return False
    plain = judge({**ev, "outcome_noise": "not needed"}, th)
    if plain.name.startswith("PASS"):
        return False
    return judge({**ev, "outcome_noise": "ok", "band": PERMISSIVE, "noise": PERMISSIVE,
                  "noise_tap": {"differ_raw": 1}}, th).name != plain.name


# the most A's noise passes could ever excuse: every row apart, every flip shown by the band too
PERMISSIVE = {"rows": 1, "kl_max": math.inf, "kl_mean": math.inf, "flips_confident": 2**62,
              "flips_near_tie": 2**62, "identical": False, "max_ulps": math.inf}


def _steps(keys: list[str]) -> str:
    """``["4:0", "4:1", ...]`` as ``rows 4 step 0, rows 4 step 1, ...`` (the first four)."""
    shown = ", ".join(f"rows {k.split(':')[0]} step {k.split(':')[1]}" for k in keys[:4])
    return shown + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def _judge_values(ev, th: Thresholds, tap, lg, local, band, band_kl) -> Verdict:
    """The passing and inconclusive verdicts, once no FAIL applies."""
    compared = tap.get("compared", True)  # False: A ran another layout; only logits compare
    if compared and tap["differ_raw"] == 0 and not tap["sequence"] and lg["identical"]:
        return Verdict("PASS bit-identical", [f"{tap['calls']} op calls and {lg['rows']} logits rows equal byte for byte"])
    if compared and tap["differ_value"] == 0 and not tap["sequence"] and lg["max_ulps"] == 0:
        return Verdict("PASS value-identical", ["only the sign of zeros differs"])
    near_frac = lg["flips_near_tie"] / max(1, lg["rows"])
    clean = not local["diverged"] or not tap["by_op"]
    if tap["sequence"]:
        return Verdict("INCONCLUSIVE", ["the candidate runs a different op sequence, so no op "
                                        "can be checked against A or the reference: "
                                        + tap["sequence"][0]])
    if lg["flips_confident"]:
        return Verdict("INCONCLUSIVE", [f"{lg['flips_confident']} confident flip(s), but the "
                                        f"reference band flips too ({band['flips_confident']})"])
    if lg["kl_max"] <= th.kl_pass and near_frac <= th.max_near_tie_flips:
        why = [f"KL max {lg['kl_max']:.3g} <= {th.kl_pass:g}",
               f"{lg['flips_near_tie']} near-tie flip(s) of {lg['rows']} rows, no confident flip"]
        if not clean:
            return Verdict("INCONCLUSIVE", why + ["cut-local could not pin every differing call: "
                                                  + "; ".join(local["diverged"][:2])])
        return Verdict("PASS logit evidence", why)
    if not compared and lg["kl_max"] <= th.layout_kl_pass and near_frac <= th.max_near_tie_flips:
        # another split of the same model rounds its partial sums elsewhere (bf16 per rank
        # before the cross-rank sum): a bug in the split (a shard, a merge, a top-k) moves the
        # logits by orders of magnitude more
        return Verdict("PASS logit evidence", [
            f"KL max {lg['kl_max']:.3g} <= layout_kl_pass {th.layout_kl_pass:g}",
            f"{lg['flips_near_tie']} near-tie flip(s) of {lg['rows']} rows, no confident flip"])
    noise = ev.get("noise")
    noise_tap = ev.get("noise_tap") or {}
    floor = max(band_kl, noise["kl_max"] if noise and noise_tap.get("differ_raw", 0) else 0.0)
    if floor > 0 and clean:
        limit = th.band_factor * floor
        band_near = (band["flips_near_tie"] / max(1, band["rows"])) if band else 0.0
        if lg["kl_max"] <= limit and near_frac <= max(th.max_near_tie_flips, th.band_factor * band_near):
            return Verdict("PASS within noise floor",
                           [f"KL max {lg['kl_max']:.3g} within {th.band_factor:g} x the floor {floor:.3g} "
                            f"(A with the touched ops on the reference{', and A vs A' if noise_tap.get('differ_raw') else ''})"])
    reasons = [f"KL max {lg['kl_max']:.3g} between kl_pass {th.kl_pass:g} and kl_fail {th.kl_fail:g}"
               if lg["kl_max"] > th.kl_pass else
               f"{lg['flips_near_tie']} near-tie flips ({near_frac:.1%} > {th.max_near_tie_flips:.1%})"]
    return Verdict("INCONCLUSIVE", reasons)


def fmt(x: float) -> str:
    if x == 0:
        return "0"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}"


# ------------------------------------------------------------------ the scorer's timed outputs
IDENTICAL_CLAIMS = {"PASS bit-identical": "first_raw_difference",
                    "PASS value-identical": "first_value_difference"}
CLAIM_KIND = {"PASS bit-identical": "bit", "PASS value-identical": "value"}  # what the scorer keeps


@dataclass(frozen=True)
class ClusterTotals:
    """One pair of logits (X against Y) over the timed replays of main's band, per cluster (a
    request: its rows share a context, so they are not independent): rows, sum of KL(X||Y),
    rows with KL(X||Y) > kl_pass, confident argmax flips; and the largest KL (reported only:
    the max alone decides nothing). ``logits.cluster_totals`` measures it."""

    rows: tuple[float, ...]
    kl_sum: tuple[float, ...]
    above: tuple[float, ...]
    flips: tuple[float, ...]
    kl_max: float

    @classmethod
    def of(cls, d: dict) -> "ClusterTotals":
        parts = {k: tuple(float(x) for x in d[k]) for k in ("rows", "kl_sum", "above", "flips")}
        if len({len(v) for v in parts.values()}) != 1:
            raise ValueError(f"cluster totals: rows, kl_sum, above and flips must list the same "
                             f"clusters, got {[len(v) for v in parts.values()]} (a bench bug)")
        return cls(**parts, kl_max=float(d["kl_max"]))

    def share(self, what: str) -> float:
        """Over all rows: mean KL (``kl_sum``), share above kl_pass (``above``), of flips."""
        n = sum(self.rows)
        return sum(getattr(self, what)) / n if n else 0.0


@dataclass(frozen=True)
class TimedBand:
    """Main's band at the scorer's context (``gates/side/timed.py`` ``band_totals``), on the
    timed replays it ran again: main and the candidate each against main with the touched ops on the
    protected reference (R), and the candidate against main."""

    main: ClusterTotals  # KL(R||A)
    candidate: ClusterTotals  # KL(R||B)
    candidate_vs_main: ClusterTotals  # KL(A||B)
    ops: tuple[str, ...]

    @classmethod
    def of(cls, d: "TimedBand | dict") -> "TimedBand":
        if isinstance(d, TimedBand):
            return d
        return cls(main=ClusterTotals.of(d["main"]), candidate=ClusterTotals.of(d["candidate"]),
                   candidate_vs_main=ClusterTotals.of(d["candidate_vs_main"]),
                   ops=tuple(d.get("ops") or ()))


@dataclass(frozen=True)
class BandCheck:
    """One statistic of the candidate's distance to the reference against main's."""

    statistic: str  # "mean KL", "rows above kl_pass", "confident flips"
    main: float  # main's, against the reference (a mean, or a share of the rows)
    candidate: float
    allowed: float | None  # margin x main's + floor (None: no margin on this statistic)
    bound: float  # the lower confidence bound of candidate - main
    floor: float  # what the bound may reach

    @property
    def ok(self) -> bool:
        return self.bound <= self.floor and (self.allowed is None or self.candidate <= self.allowed)


# statistic -> (ClusterTotals field, floor given kl_pass, whether the margin applies). The floor:
# a mean KL at or below kl_pass is what the fixed rule passes in every row; a share of rows above
# kl_pass or of confident flips has none (where main has none, the candidate may have none
# either). The margin holds on the share of rows above kl_pass: a mean KL is a few rows' heavy
# tail at 128k (its point estimate refused 9 % of simulated honest changes as close as main,
# tests/gates/test_timed_band.py), and confident flips are rare events (#9 at 128k: none in
# 1 686 rows), where one against zero says nothing: the bootstrap alone weighs those two
BAND_STATISTICS = {"mean KL": ("kl_sum", lambda kl_pass: kl_pass, False),
                   "rows above kl_pass": ("above", lambda kl_pass: 0.0, True),
                   "confident flips": ("flips", lambda kl_pass: 0.0, False)}


def judge_band(band: TimedBand, alpha: float, margin: float, kl_pass: float, iters: int,
               seed: int = 0) -> list[BandCheck]:
    """Pure (seeded): is the candidate as close to the reference as main at the scorer's
    context? For each statistic T of :data:`BAND_STATISTICS` (over the band's rows, the
    candidate's and main's against the reference), two conditions:

    * the candidate is not shown further than main: the lower bound at one-sided level
      ``1 - alpha / 3`` of ``T(candidate) - T(main)``, over a bootstrap that resamples clusters
      (requests) with replacement, both sides' rows of a request together (paired), does not
      exceed T's floor. So a candidate exactly as close as main fails this with probability
      at most ``alpha`` over the three (asymptotically in the number of requests; the rows
      of one request may depend on each other in any way);
    * the margin (rows above kl_pass): ``T(candidate) <= margin x T(main) + floor``.
      Where main's own rounding moves no row past kl_pass the candidate may move none either
      (the fixed rule's bar), and where it moves some the candidate may move up to ``margin``
      times as many whatever the sample's size.

    How often a candidate further than main passes depends on how much further and on how many
    of the band's rows main's own rounding moves: docs/gates.md states it for samples like #9's."""
    import numpy as np

    keep = [i for i, n in enumerate(band.main.rows) if n > 0]
    rows = np.array([band.main.rows[i] for i in keep])
    rng = np.random.default_rng(seed)
    n = len(keep)
    weights = rng.multinomial(n, [1.0 / n] * n, size=iters).astype(float) if n else np.zeros((iters, 0))
    total = weights @ rows
    level = alpha / len(BAND_STATISTICS)
    checks = []
    for name, (field_name, floor, margined) in BAND_STATISTICS.items():
        a = np.array([getattr(band.main, field_name)[i] for i in keep])
        b = np.array([getattr(band.candidate, field_name)[i] for i in keep])
        boot = np.divide(weights @ (b - a), total, out=np.zeros(iters), where=total > 0)
        main, cand = band.main.share(field_name), band.candidate.share(field_name)
        checks.append(BandCheck(name, main, cand, margin * main + floor(kl_pass) if margined else None,
                                float(np.quantile(boot, level)) if n else 0.0, floor(kl_pass)))
    return checks


def band_summary(band: TimedBand, checks: list[BandCheck]) -> dict:
    """The band rule's outcome as the report keeps it (JSON)."""
    return {"ok": all(c.ok for c in checks), "ops": list(band.ops),
            "rows": sum(band.main.rows), "clusters": sum(1 for n in band.main.rows if n > 0),
            "checks": [{"statistic": c.statistic, "main": c.main, "candidate": c.candidate,
                        "allowed": c.allowed, "bound": c.bound, "floor": c.floor, "ok": c.ok}
                       for c in checks],
            "kl_max": {"main": band.main.kl_max, "candidate": band.candidate.kl_max,
                       "candidate_vs_main": band.candidate_vs_main.kl_max},
            "candidate_vs_main": {"mean KL": band.candidate_vs_main.share("kl_sum"),
                                  "rows above kl_pass": band.candidate_vs_main.share("above"),
                                  "confident flips": band.candidate_vs_main.share("flips")}}


def judge_timed(timed: dict, accuracy: dict | None, th: Thresholds, sketch_limit: float,
                band: dict | None = None, alpha: float | None = None, iters: int = 2000) -> dict | None:
    """The outputs of the scorer's timed replays against main's on the same inputs
    (``gates/side/timed.py``): None when they pass, else the failed check ``{check, why}``.

    ``accuracy``: the accuracy gate's verdict for this commit and the evidence it weighed
    (``verdict``, and ``band``, ``noise``, ``noise_tap`` from ``kern test``'s evidence), or
    None when the scorer runs alone (no band: the rule's fixed limits apply).
    An identical claim (bit or value) must hold for every timed replay exactly. Otherwise
    B's recurrent state must stay within ``sketch_limit`` of main's (relative distance of the
    random projections) and B's timed logits pass the accuracy gate's own rule (:func:`judge`
    on the same thresholds, near-tie rule and band: fixed limits at the tap's context, on a
    random sample of as many rows as the gate judged), or, with ``band`` (main's band at the
    scorer's context, :class:`TimedBand`), the band rule instead (:func:`judge_band` at
    ``alpha``, margin ``band_factor``, ``iters`` bootstrap resamples): every row finite, and as
    close to the reference as main in mean KL, rows above kl_pass and confident flips."""
    claim = (accuracy or {}).get("verdict")
    if not timed:
        return None
    key = IDENTICAL_CLAIMS.get(claim)
    if key:
        for bucket in sorted(timed, key=int):
            first = timed[bucket][key]
            if first is not None:
                return {"check": "timed_outputs_identical", "bucket": int(bucket),
                        "replay": first["replay"],
                        "why": f"timed outputs differ from main's although the accuracy gate saw "
                               f"identical ones ({claim}): at {bucket} rows, timed replay "
                               f"{first['replay']} ({', '.join(first['what'])} differ)"}
        return None
    for bucket in sorted(timed, key=int):
        t = timed[bucket]
        if not t["sketch_rel_max"] <= sketch_limit:
            w = t["sketch_worst"] or {}
            return {"check": "timed_outputs_accuracy", "bucket": int(bucket),
                    "why": f"timed outputs fail the accuracy gate's rule: the recurrent state "
                           f"written at {bucket} rows (timed replay {w.get('replay')}) is "
                           f"{t['sketch_rel_max']:.3g} from main's (relative), expected at most "
                           f"{sketch_limit:g}"}
    if any("logits" not in timed[b] for b in timed):
        return {"check": "timed_outputs_accuracy",
                "why": f"timed outputs cannot be judged: only digests were kept (the scorer was told "
                       f"the claim {claim!r}; a bench bug)"}
    if band is not None:
        return _judge_band_timed(timed, band, alpha, th, iters)
    # the rule and the band were measured on the gate's own number of rows: judged on a sample
    # of as many timed rows, drawn per run (every row's statistics are reported beside it)
    key = "logits_sample" if all("logits_sample" in timed[b] for b in timed) else "logits"
    lg = merge_logit_stats([timed[b][key] for b in sorted(timed, key=int)])
    acc = accuracy or {}
    calls = sum(t["replays"] for t in timed.values())
    ev = {"outcome_a": "ok", "outcome_b": "ok", "protected_changed": [], "same_setup": True,
          # nothing of the tap applies here: the replays' outputs are the only evidence
          "tap": {"calls": calls, "differ_raw": calls, "differ_value": calls, "sequence": [],
                  "by_op": {}, "unwritten": [], "nonfinite": [], "outside": [], "compared": True},
          "logits": lg, "band": acc.get("band"), "noise": acc.get("noise"),
          "noise_tap": acc.get("noise_tap"), "outcome_noise": "not needed"}
    v = judge(ev, th)
    if v.name.startswith("PASS"):
        return None
    worst = lg["worst"][0]["at"].replace(" step ", " timed replay ") if lg["worst"] and key == "logits" else ""
    return {"check": "timed_outputs_accuracy",
            "why": f"timed outputs fail the accuracy gate's rule ({v.name}): "
                   f"{'; '.join(v.reasons[:2])}" + (f"; worst at {worst}" if worst else "")
                   + (f" (on {lg['rows']} timed rows drawn at random, as many as the gate judged)"
                      if key == "logits_sample" else "")}


def _judge_band_timed(timed: dict, band: dict, alpha: float, th: Thresholds, iters: int) -> dict | None:
    """The band rule on the timed outputs (:func:`judge_timed` with a band): every timed row
    finite and present, and the candidate not shown further from the reference than main."""
    lg = merge_logit_stats([timed[b]["logits"] for b in sorted(timed, key=int)])
    if lg["nonfinite_rows"] or lg["missing"]:
        return {"check": "timed_outputs_accuracy", "rule": "band",
                "why": f"timed outputs hold {lg['nonfinite_rows']} logits rows with NaN/Inf"
                       + (f" and miss {lg['missing'][:4]}" if lg["missing"] else "")
                       + " (no band excuses them)"}
    tb = TimedBand.of(band)
    checks = judge_band(tb, alpha, th.band_factor, th.kl_pass, iters)
    if all(c.ok for c in checks):
        return None
    return {"check": "timed_outputs_accuracy", "rule": "band",
            "why": "timed outputs are further from the reference than main's at the scorer's context: "
                   + "; ".join(_band_reason(c, alpha) for c in checks if not c.ok)
                   + f" (on {sum(tb.main.rows):.0f} timed rows of {sum(1 for n in tb.main.rows if n > 0)}"
                     f" requests, {', '.join(tb.ops) or 'no op'} on the reference; KL max "
                     f"{fmt(tb.candidate.kl_max)} against main's {fmt(tb.main.kl_max)})"}


def _band_reason(c: BandCheck, alpha: float) -> str:
    what = "" if c.statistic == "mean KL" else " (share of rows)"
    head = f"{c.statistic}{what} against the reference {fmt(c.candidate)}, main's {fmt(c.main)}"
    if c.allowed is not None and c.candidate > c.allowed:
        return f"{head}: more than the {fmt(c.allowed)} allowed (band_factor x main's + {fmt(c.floor)})"
    return (f"{head}: the candidate's excess is at least {fmt(c.bound)} (one-sided "
            f"{1 - alpha / len(BAND_STATISTICS):.1%}), more than {fmt(c.floor)}")