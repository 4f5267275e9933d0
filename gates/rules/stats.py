"""The scorer's statistics: pure functions over replay times. No clocks, no GPUs.

Samples are milliseconds per replay, grouped ``{bucket: [ms, ...]}`` per side. The score is
the weighted mean of per-bucket medians. A/B decisions use a bootstrap interval of the score
difference and a noise band measured from A against A (the first and last A block of each
A B B A round), never a single number.

Paired samples. The scorer runs input set ``n`` for the ``n``-th replay of a bucket on both
sides (each side's input cursor starts at the same set and advances once per replay). On the
H200 the input set moves a replay's time by 0.7-4.6 % (routing changes the work) while A's and
B's ``n``-th replays correlate at 0.99, so comparing the sides replay by replay removes that
spread: :func:`paired_delta` bootstraps the median of ``log(b_n / a_n)``, and
:func:`paired_noise_band` compares A against A after dividing each A replay by its pair's
geometric mean (the input's own cost cancels; a real speed-up scales every such ratio alike
and so cannot widen the band). Unpaired, a true 1 % gain was found in 2 of 100 simulated
A/Bs at the gpu profile's 3 rounds x 8 replays (tests/gates/test_noise.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of no samples")
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        raise ValueError("quantile of no samples")
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def cv(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    if len(xs) < 2 or m == 0:
        return 0.0
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) / m


def score(medians: dict, buckets: list[int], weights: list[float]) -> float:
    """Weighted mean of per-bucket medians (ms)."""
    return sum(w * medians[b] for b, w in zip(buckets, weights)) / sum(weights)


def bucket_summary(samples: list[float]) -> dict:
    return {"median": median(samples), "p10": quantile(samples, 0.1),
            "p90": quantile(samples, 0.9), "cv": cv(samples), "n": len(samples)}


def bootstrap_delta(a: dict, b: dict, buckets: list[int], weights: list[float], *,
                    iters: int, seed: int, level: float = 0.95) -> dict:
    """Bootstrap interval of ``score(B) - score(A)`` and of each bucket's median difference,
    resampling each side's replays within each bucket independently."""
    rng = np.random.default_rng(seed)
    point = {bk: median(b[bk]) - median(a[bk]) for bk in buckets}
    point_score = score({bk: median(b[bk]) for bk in buckets}, buckets, weights) - \
        score({bk: median(a[bk]) for bk in buckets}, buckets, weights)
    lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2
    total = np.zeros(iters)
    per = {}
    for bk, w in zip(buckets, weights):
        xa, xb = np.asarray(a[bk], dtype=float), np.asarray(b[bk], dtype=float)
        ma = np.median(xa[rng.integers(0, len(xa), (iters, len(xa)))], axis=1)
        mb = np.median(xb[rng.integers(0, len(xb), (iters, len(xb)))], axis=1)
        d = mb - ma
        per[bk] = {"delta": point[bk], "low": float(np.quantile(d, lo_q)),
                   "high": float(np.quantile(d, hi_q))}
        total += w * d
    total /= sum(weights)
    return {"delta": point_score, "low": float(np.quantile(total, lo_q)),
            "high": float(np.quantile(total, hi_q)), "buckets": per}


def paired_delta(a: dict, b: dict, buckets: list[int], weights: list[float], *,
                 iters: int, seed: int, level: float = 0.95) -> dict:
    """Like :func:`bootstrap_delta`, for samples paired by index (``a[bk][n]`` and ``b[bk][n]``
    ran the same input). A bucket's delta is ``median(a) * (exp(median(log(b_n/a_n))) - 1)``
    ms; the bootstrap resamples pairs."""
    rng = np.random.default_rng(seed)
    lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2
    total = np.zeros(iters)
    per, point_score = {}, 0.0
    for bk, w in zip(buckets, weights):
        r = _log_ratios(a[bk], b[bk], bk)
        ma = median(a[bk])
        point = ma * math.expm1(float(np.median(r)))
        d = ma * np.expm1(np.median(r[rng.integers(0, len(r), (iters, len(r)))], axis=1))
        per[bk] = {"delta": point, "low": float(np.quantile(d, lo_q)),
                   "high": float(np.quantile(d, hi_q))}
        total += w * d
        point_score += w * point
    total /= sum(weights)
    return {"delta": point_score / sum(weights), "low": float(np.quantile(total, lo_q)),
            "high": float(np.quantile(total, hi_q)), "buckets": per, "paired": True}


def _log_ratios(xa: list[float], xb: list[float], bucket) -> np.ndarray:
    if len(xa) != len(xb) or not xa:
        raise ValueError(f"paired samples at {bucket} rows: both sides need the same number of "
                         f"replays, got A {len(xa)}, B {len(xb)}")
    a_, b_ = np.asarray(xa, dtype=float), np.asarray(xb, dtype=float)
    if (a_ <= 0).any() or (b_ <= 0).any() or not (np.isfinite(a_).all() and np.isfinite(b_).all()):
        raise ValueError(f"replay times at {bucket} rows must be finite and positive")
    return np.log(b_ / a_)


def paired_noise_band(a: dict, b: dict, visits: dict, buckets: list[int],
                      weights: list[float], *, floor_pct: float, iters: int, seed: int) -> float:
    """The A-vs-A band for paired samples. ``visits[bk][n]`` is the A visit that ran A's
    ``n``-th replay at ``bk`` rows; even-numbered A visits (each round's first) are
    compared with odd-numbered ones (its last), on A's times divided by their pair's geometric
    mean and scaled by the geometric mean of the two medians, so the inputs' own spread is not
    counted as noise and the normalized times sit at A's median whatever B's speed (scaled by
    A's median alone they sat at ``A·sqrt(A/B)``: the band grew with a gain, 1.5x for a 2.3x
    faster candidate)."""
    first, last = {}, {}
    for bk in buckets:
        scale = math.sqrt(median(a[bk]) * median(b[bk]))
        norm = scale * np.exp(-0.5 * _log_ratios(a[bk], b[bk], bk))  # ~ a_n, without the input
        first[bk] = [float(x) for x, v in zip(norm, visits[bk]) if v % 2 == 0]
        last[bk] = [float(x) for x, v in zip(norm, visits[bk]) if v % 2 == 1]
    # the floor is a share of A's own score
    floor = floor_pct / 100.0 * score({bk: median(a[bk]) for bk in buckets}, buckets, weights)
    if not last[buckets[0]]:  # one A visit: nothing to compare it with
        return floor
    return max(floor, noise_band(first, last, buckets, weights, floor_pct=0.0, iters=iters, seed=seed))


def noise_band(a_first: dict, a_last: dict, buckets: list[int], weights: list[float], *,
               floor_pct: float, iters: int, seed: int) -> float:
    """How far A moves against itself (ms of score): the larger of the A-vs-A interval's
    reach from zero and ``floor_pct`` of A's score."""
    d = bootstrap_delta(a_first, a_last, buckets, weights, iters=iters, seed=seed)
    a_score = score({bk: median(a_first[bk] + a_last[bk]) for bk in buckets}, buckets, weights)
    return max(abs(d["low"]), abs(d["high"]), floor_pct / 100.0 * a_score)


def classify(low: float, high: float, band: float) -> str:
    """``faster`` when the whole interval lies below ``-band``, ``slower`` when above
    ``+band``, else ``within noise``."""
    if high < -band:
        return "faster"
    if low > band:
        return "slower"
    return "within noise"


@dataclass(frozen=True)
class GuardResult:
    ok: bool
    worst_bucket: int | None
    worst_pct: float

    def text(self) -> str:
        if self.ok:
            return "guard ok"
        return f"guard: {self.worst_pct:+.1f} % at {self.worst_bucket} rows"


def guard(a: dict, b: dict, buckets: list[int], limit_pct: float, per_bucket_ci: dict) -> GuardResult:
    """No bucket may be slower than ``limit_pct`` (the interval's point estimate, paired or
    not) while its interval lies above zero (confidently slower)."""
    worst, worst_pct = None, -math.inf
    bad = False
    for bk in buckets:
        pct = per_bucket_ci[bk]["delta"] / median(a[bk]) * 100.0
        if pct > worst_pct:
            worst, worst_pct = bk, pct
        if pct > limit_pct and per_bucket_ci[bk]["low"] > 0:
            bad = True
    return GuardResult(not bad, worst, worst_pct)


# ------------------------------------------------------------------ integrity of the samples
# A visit's checks (from the side) that must all be zero / empty for its times to count.
CHECKS = ("unwritten_or_invalid", "nonfinite", "repeated_outputs", "threads_left_running", "tampered")


def persisting_l2(a_visits: list[dict], b_visits: list[dict]) -> dict | None:
    """A change the candidate made to the L2 set aside for persisting accesses (an access
    policy window that keeps data in L2 across replays needs some). The side zeroes it before
    each series of timed replays (``tamper.clear_persisting_l2``) and reports per series what
    it found (``persisting_l2_bytes``), what it had left before (``persisting_l2_left``, None
    at a process's first series) and what was set aside after (``persisting_l2_after``). The
    candidate's doing: a series that found other than what the side left, one that ended with
    any set aside, or a process's first series finding an amount no process of main's found
    (the driver's own default, 11.8 MB on the H200, 2026-12-01, is main's too: raised or
    lowered to fit a window, it differs). None when nothing changed (and on the CPU)."""
    def held(v):
        return v.get("persisting_l2_bytes") or 0

    why = []
    for v in b_visits:
        left = v.get("persisting_l2_left")
        if left is not None and held(v) != left:
            why.append(f"{held(v)} bytes found before a series at {v.get('bucket')} rows, "
                       f"where the side had left {left}")
        if v.get("persisting_l2_after"):
            why.append(f"{v['persisting_l2_after']} bytes set aside after the timed series at "
                       f"{v.get('bucket')} rows (zeroed before it)")
    mains = {held(v) for v in a_visits if v.get("persisting_l2_left", None) is None}
    firsts = {held(v) for v in b_visits if v.get("persisting_l2_left", None) is None}
    if mains and firsts - mains:
        why.append(f"{sorted(firsts - mains)} bytes at the candidate's process start, main's "
                   f"{sorted(mains)}")
    if not why:
        return None
    return {"check": "persisting_l2", "why": "the L2 set aside for persisting accesses was changed "
            "by the candidate's code (an access policy window keeping data in L2 across replays): "
            + "; ".join(why[:3])}


def failed_checks(checks: list[dict]) -> list[dict]:
    """The visits whose output or integrity checks failed."""
    return [c for c in checks if any(c.get(k) for k in CHECKS)]


def far_from_reference(ops: dict, max_rel_rms: float) -> dict | None:
    """``ops`` (``gates/side/opcheck.py``: op -> worst rel_rms, NaN count, where) of one step run
    in the scorer's process: None when every op is within ``max_rel_rms`` of the protected
    reference and finite, else the failed check. The limit is for gross departures (an op
    skipped or replaced when benched), far above rounding (main's ops sit near 1e-4); the
    accuracy gate judges the fine differences at its own shapes."""
    far = {op: o for op, o in ops.items() if o["nan"] or not o["rel_rms"] <= max_rel_rms}
    if not far:
        return None
    op, o = max(far.items(), key=lambda kv: (kv[1]["nan"], kv[1]["rel_rms"]))
    return {"check": "ops_match_reference", "ops": sorted(far), "max_rel_rms": max_rel_rms,
            "why": f"{op} at {o['at']}: rel RMS {o['rel_rms']:.3g} against the reference, "
                   f"{o['nan']} NaN/Inf (expected at most {max_rel_rms:g} and none) in the "
                   f"scorer's own step"}


def worst_ops(tables: list[dict]) -> dict:
    """Per op the worst row (of several ranks or buckets) of ``opcheck.ReferenceCheck.table()`` (NaN counts summed)."""
    out: dict = {}
    for t in tables:
        for op, o in t.items():
            w = out.get(op)
            if w is None or o["rel_rms"] > w["rel_rms"]:
                out[op] = {**o, "nan": o["nan"] + (w["nan"] if w else 0)}
            else:
                w["nan"] += o["nan"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["rel_rms"]))


def below_floor(medians: dict, floor_bytes: dict, bandwidth_Bps: float | None) -> dict | None:
    """A bucket whose median replay is faster than its roofline floor: the bytes the step must
    move (``cost``, counted on main's side for the same workload) over the read bandwidth
    measured on this card in the same run. No kernel moves its bytes faster than the card can
    read them, so such a time is a measurement of something other than the step. None when
    every bucket is at or above its floor, or without a measured bandwidth (the CPU)."""
    if not bandwidth_Bps:
        return None
    fast = []
    for b, ms in sorted(medians.items()):
        if b not in floor_bytes:
            continue
        floor_ms = floor_bytes[b] / bandwidth_Bps * 1e3
        if ms < floor_ms:
            fast.append((b, ms, floor_ms))
    if not fast:
        return None
    b, ms, fl = min(fast, key=lambda x: x[1] / x[2])
    return {"check": "roofline_floor", "buckets": [x[0] for x in fast],
            "why": f"faster than the roofline floor: {ms:.3f} ms at {b} rows, below the "
                   f"{fl:.3f} ms its {floor_bytes[b] / 1e9:.3f} GB take at the "
                   f"{bandwidth_Bps / 1e12:.2f} TB/s read bandwidth measured in this run"}


def hidden_time(a_visits: list[dict], b_visits: list[dict], max_pct: float) -> dict | None:
    """Time the coordinator saw pass that the candidate's clock did not report.

    Each visit: ``{"bucket", "replays", "wall_ms"}`` (the coordinator's clock around one
    ``time`` request) and ``"sum_ms"`` (the side's replay times added up). ``wall - sum`` per
    replay is the untimed work between replays; both sides run the same untimed code, so B's
    may exceed A's only by noise. More than ``max_pct`` % of B's median replay means B's
    clock runs slow (a replaced timer) or B's work runs between replays (a thread, a side
    stream). Per bucket, medians over visits; None when every bucket is consistent."""
    def per_replay(visits):
        out: dict = {}
        for v in visits:
            if not all(k in v for k in ("replays", "wall_ms", "sum_ms")):
                continue  # not timed by the coordinator: no evidence either way
            n = max(1, v["replays"])
            out.setdefault(v["bucket"], []).append(((v["wall_ms"] - v["sum_ms"]) / n, v["sum_ms"] / n))
        return {b: (median([x[0] for x in xs]), median([x[1] for x in xs])) for b, xs in out.items()}

    a, b = per_replay(a_visits), per_replay(b_visits)
    bad = []
    for bucket, (b_hidden, b_step) in sorted(b.items()):
        if bucket not in a:
            continue
        excess = b_hidden - a[bucket][0]
        if excess > max_pct / 100.0 * b_step:
            bad.append({"bucket": bucket, "excess_ms": excess, "step_ms": b_step})
    if not bad:
        return None
    w = max(bad, key=lambda x: x["excess_ms"] / max(x["step_ms"], 1e-9))
    return {"check": "hidden_time", "buckets": [x["bucket"] for x in bad], "max_pct": max_pct,
            "why": f"{w['excess_ms']:.3f} ms per replay at {w['bucket']} rows passed between "
                   f"replays beyond main's untimed work, against {w['step_ms']:.3f} ms timed "
                   f"(expected at most {max_pct:g} %): a clock that runs slow or work outside "
                   f"the timed region"}
