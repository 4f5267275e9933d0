"""The journey: what was tried, what merged, what it bought, and why everything else was dropped.

Pure functions from ledger records (:class:`~harness.ledger.Attempt`, phases, scores) to rows
and documents; nothing here reads the ledger, the clock or the disk, so the same records always
give the same bytes (the golden test relies on it).

Where a result's numbers come from (the orchestrator writes them); the result column says
what decided each attempt:

    merged (−0.35 [−0.41, −0.29])
                               state merged: ``delta_ms`` (B − A, ms) and its interval
                               (``ci_low``, ``ci_high``)
    abandoned: within noise (−417.69 [−900.10, +60.30], band ±120.00)
    abandoned: slower (+0.21 [+0.15, +0.27])
                               reason "within noise" / "slower": the same, and the noise band
                               the interval was held to (``gate["bench"]["band_ms"]``) when
                               recorded
    abandoned: accuracy (FAIL: KL(A||B) max 0.031 > limit 0.01)
                               reason "accuracy": ``gate["accuracy"]["verdict"]`` and its first
                               reason (``["reasons"][0]``, cut at 100 characters), ``+N more``
                               when it has more; ``["tag"]`` when no reason is recorded
    abandoned: guard (+2.4 % at 16 rows)
                               reason "guard": ``gate["guard"]["worst_pct"]`` and ``["rows"]``
    abandoned: scorer check (timed_outputs_identical: …)
                               reason "scorer check": the first failed check of
                               ``gate["bench"]["checks"]`` (its name and ``why``), or the
                               scorer's outcome (``gate["bench"]["outcome"]``)
    abandoned: <reason>        any other reason; ``gate["detail"]`` (a short string), when
                               present, overrides the parenthesis for every reason
    crashed (illegal memory access at 256 rows) · timed out (scorer timeout)
                               the recorded reason
    not done: estimated −0.4   ``estimate_ms``
    waiting on #31             ``waiting_on``
    running · queued · judging

Measured numbers in the result column print with a typographic minus, as prose; the score
change column keeps ASCII signs (CSV readers parse it as a number).
"""
from __future__ import annotations

import base64
import csv
import html as _html
import io
import math
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Iterable, Mapping, Sequence

from .ledger import (ABANDONED, ACCURACY, CRASHED, GUARD, MERGED, NOT_DONE, SLOWER, TIMED_OUT,
                     WAITING, WITHIN_NOISE, Attempt, Phase, Score)

SCORER_CHECK = "scorer check"  # gates.decision.decide's reason when a scorer check failed

MINUS = "\u2212"  # estimates print with a typographic minus, as in the published journey

TEXT = {
    "en": {
        "title": "Journey",
        "phase": "Phase",
        "unknown_phase": "no phase recorded",
        "note": "Scores in this phase are not comparable with other phases: the score's "
                "definition (buckets, weights, context, workload) differs.",
        "cols": ("#", "attempt", "score change (ms)", "result"),
        "phase_col": "phase",
        "empty": "No attempts yet.",
        "summary": "{merged} merged of {total} attempts · total gain {gain} ms",
        "main": "main {first} → {last} ms",
        "plot": "Main's score and every attempt",
        "no_scores": "No attempt or score recorded yet.",
    },
    "zh": {
        "title": "优化历程",
        "phase": "阶段",
        "unknown_phase": "未记录阶段",
        "note": "本阶段的分数与其他阶段不可比：分数的定义（桶、权重、上下文、负载）不同。",
        "cols": ("#", "尝试", "分数变化 (ms)", "结果"),
        "phase_col": "阶段",
        "empty": "尚无尝试。",
        "summary": "已合并 {merged} / 共 {total} 次尝试 · 总收益 {gain} ms",
        "main": "主分支 {first} → {last} ms",
        "plot": "主分支的分数与每次尝试",
        "no_scores": "尚无尝试或分数记录。",
    },
}


@dataclass(frozen=True)
class JourneyRow:
    number: int
    title: str
    change: str  # the score change column: B − A in ms, signed; "" when nothing was measured
    result: str
    state: str
    phase_id: int | None
    delta_ms: float | None


# --------------------------------------------------------------------------- numbers
def fmt_delta(ms: float) -> str:
    """A measured score change: signed, two decimals (more digits only below 0.005 ms)."""
    if ms != 0 and abs(ms) < 0.005:
        return f"{ms:+.2g}"
    return f"{ms:+.2f}"


def fmt_estimate(ms: float) -> str:
    """A declined idea's estimate: two significant digits, typographic minus."""
    if ms == 0:
        return "0"
    decimals = max(1, 1 - math.floor(math.log10(abs(ms))))
    text = f"{abs(ms):.{decimals}f}"
    if "." in text:
        text = text.rstrip("0")
        text = text + "0" if text.endswith(".") else text
    return (MINUS if ms < 0 else "+") + text


def fmt_gain(ms: float) -> str:
    return f"{ms:.2f}"


# Short tags for the accuracy gate's reason sentences (gates/verdict.judge), first match wins.
_TAGS = (
    ("protected files changed", "protected"),
    ("candidate side ended", "crash"),
    ("different weights or state", "setup"),
    ("output not fully written", "unwritten"),
    ("non-finite", "nan"),
    ("NaN/Inf", "nan"),
    ("wrote outside", "outside"),
    ("confident argmax flip", "flip"),
    ("KL", "kl"),
    ("reference tolerance", "reference"),
    ("no logits", "missing"),
    ("near-tie flips", "near-ties"),
    ("cut-local", "cut-local"),
    ("base side did not finish", "base"),
)


def accuracy_tag(reasons: Iterable[str]) -> str:
    """One word for the accuracy gate's first reason (``kl``, ``flip``, ``nan`` …), '' if none."""
    for r in reasons:
        for needle, tag in _TAGS:
            if needle in r:
                return tag
    return ""


def _signed(ms: float) -> str:
    return fmt_delta(ms).replace("-", MINUS)


def measured(a: Attempt, band_ms=None) -> str:
    """``−0.35 [−0.41, −0.29]``: the change and its interval ('' when nothing was measured),
    then the noise band it was held to when known."""
    if a.delta_ms is None:
        return ""
    text = _signed(a.delta_ms)
    if a.ci_low is not None and a.ci_high is not None:
        text += f" [{_signed(a.ci_low)}, {_signed(a.ci_high)}]"
    if isinstance(band_ms, (int, float)) and not isinstance(band_ms, bool):
        text += f", band ±{abs(band_ms):.2f}"
    return text


def _clip(text: str, limit: int = 100) -> str:
    """``text`` on one line, at most ``limit`` characters: cut at a word when one ends late
    enough, the cut marked with an ellipsis."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    if space >= limit * 0.6:
        cut = cut[:space]
    return cut.rstrip(" ,;:(") + "…"


def _sub(gate: dict, key: str) -> dict:
    v = gate.get(key)
    return v if isinstance(v, dict) else {}


def _detail(a: Attempt) -> str:
    gate = a.gate if isinstance(a.gate, dict) else {}
    if isinstance(gate.get("detail"), str) and gate["detail"]:
        return gate["detail"]
    if a.state == MERGED:
        return measured(a)
    if a.state in (CRASHED, TIMED_OUT):
        return _clip(a.reason) if a.reason else ""
    if a.reason in (SLOWER, WITHIN_NOISE):
        return measured(a, _sub(gate, "bench").get("band_ms"))
    if a.reason == ACCURACY:
        acc = _sub(gate, "accuracy")
        verdict = str(acc.get("verdict") or "")
        reasons = [str(r) for r in acc.get("reasons") or [] if str(r).strip()]
        if reasons:
            more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
            return (f"{verdict}: " if verdict else "") + _clip(reasons[0]) + more
        tag = str(acc.get("tag") or "")
        if tag in verdict.split():  # the verdict already names it
            tag = ""
        return " ".join(x for x in (verdict, tag) if x)
    if a.reason == GUARD:
        g = _sub(gate, "guard")
        pct, rows = g.get("worst_pct"), g.get("rows")
        if pct is None:
            return ""
        return f"{pct:+.1f} %".replace("-", MINUS) + (f" at {rows} rows" if rows is not None else "")
    if a.reason == SCORER_CHECK:
        b = _sub(gate, "bench")
        checks = [c for c in b.get("checks") or [] if isinstance(c, dict)]
        if checks:
            c = checks[0]
            name, why = str(c.get("check") or "check"), c.get("why")
            more = f" (+{len(checks) - 1} more)" if len(checks) > 1 else ""
            return _clip(f"{name}: {why}" if why else name) + more
        if b.get("graph_matches_eager") is False:
            return "the CUDA graph's outputs differ from eager"
        if b.get("outcome"):
            return _clip(f"{b['outcome']}" + (f": {b['error']}" if b.get("error") else ""))
    return ""


def result(a: Attempt) -> str:
    """The result column for one attempt (see the module docstring for every form)."""
    if a.state == ABANDONED:
        d = _detail(a)
        return f"abandoned: {a.reason or 'no reason recorded'}" + (f" ({d})" if d else "")
    if a.state == NOT_DONE:
        return "not done" + (f": estimated {fmt_estimate(a.estimate_ms)}"
                             if a.estimate_ms is not None else "")
    if a.state == WAITING:
        return f"waiting on #{a.waiting_on}" if a.waiting_on is not None else "waiting"
    if a.state in (MERGED, CRASHED, TIMED_OUT):
        d = _detail(a)
        return a.state + (f" ({d})" if d else "")
    return a.state  # running, queued, judging


def change(a: Attempt) -> str:
    # Only judged attempts have a measured change; an estimate is not a measurement.
    if a.delta_ms is None or a.state not in (MERGED, ABANDONED):
        return ""
    return fmt_delta(a.delta_ms)


def rows(attempts: Iterable[Attempt]) -> list[JourneyRow]:
    return [JourneyRow(a.number, a.title, change(a), result(a), a.state, a.phase_id, a.delta_ms)
            for a in sorted(attempts, key=lambda a: a.number)]


# --------------------------------------------------------------------------- grouping
def _phase_map(phases) -> dict[int, Phase]:
    """Phases as given: Phase records, or a mapping id -> definition."""
    if isinstance(phases, Mapping):
        return {int(k): (v if isinstance(v, Phase) else Phase(int(k), dict(v), "", ""))
                for k, v in phases.items()}
    return {p.id: p for p in phases or ()}


def _describe(definition: dict) -> str:
    parts = []
    for k in sorted(definition):
        v = definition[k]
        if isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        elif isinstance(v, dict):
            v = ",".join(f"{kk}={vv}" for kk, vv in sorted(v.items()))
        v = str(v)
        parts.append(f"{k} {v[:12] + '…' if len(v) > 24 else v}")
    return " · ".join(parts)


@dataclass(frozen=True)
class _Section:
    phase_id: int | None
    heading: str
    rows: list
    merged: int
    gain_ms: float
    first_score: float | None
    last_score: float | None


def _sections(attempts, phases, scores, lang) -> list[_Section]:
    t = TEXT[lang]
    pm = _phase_map(phases)
    by_phase: dict = {}
    for r in rows(attempts):
        by_phase.setdefault(r.phase_id, []).append(r)
    out = []
    for pid in sorted(by_phase, key=lambda p: (p is None, p or 0)):
        rs = by_phase[pid]
        if pid is None:
            heading = t["unknown_phase"]
        elif pid in pm:
            desc = _describe(pm[pid].definition)
            heading = f"{t['phase']} {pid}" + (f" · {desc}" if desc else "")
        else:
            heading = f"{t['phase']} {pid}"
        merged = [r for r in rs if r.state == MERGED]
        gain = -sum(r.delta_ms for r in merged if r.delta_ms is not None)
        ss = [s for s in scores or () if s.phase_id == pid]
        out.append(_Section(pid, heading, rs, len(merged), gain,
                            ss[0].score_ms if ss else None, ss[-1].score_ms if ss else None))
    return out


def _summary(sec: _Section, lang: str) -> str:
    t = TEXT[lang]
    s = t["summary"].format(merged=sec.merged, total=len(sec.rows), gain=fmt_gain(sec.gain_ms))
    if sec.first_score is not None:
        s += " · " + t["main"].format(first=f"{sec.first_score:.3f}", last=f"{sec.last_score:.3f}")
    return s


def _check_lang(lang: str) -> None:
    if lang not in TEXT:
        raise ValueError(f"journey: language {lang!r} is not known; expected one of {', '.join(TEXT)}")


# --------------------------------------------------------------------------- renderers
def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown(attempts: Iterable[Attempt], phases=(), lang: str = "en",
             scores: Sequence[Score] = ()) -> str:
    """One table per phase, its note and summary line, under a title."""
    _check_lang(lang)
    t = TEXT[lang]
    out = [f"# {t['title']}", ""]
    secs = _sections(attempts, phases, scores, lang)
    if not secs:
        return "\n".join(out + [t["empty"], ""])
    for sec in secs:
        out += [f"## {sec.heading}", "", f"*{t['note']}*", "",
                "| " + " | ".join(t["cols"]) + " |", "|---:|---|---:|---|"]
        out += [f"| {r.number} | {_md_cell(r.title)} | {r.change} | {_md_cell(r.result)} |"
                for r in sec.rows]
        out += ["", _summary(sec, lang), ""]
    return "\n".join(out)


def csv_text(attempts: Iterable[Attempt], phases=(), lang: str = "en") -> str:
    """One line per attempt: the journey's columns, then the raw numbers behind them."""
    _check_lang(lang)
    t = TEXT[lang]
    by_number = {a.number: a for a in attempts}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([t["phase_col"], *t["cols"], "state", "reason", "delta_ms", "ci_low", "ci_high",
                "delta_pct", "estimate_ms", "commit_sha", "tokens", "cost_usd"])
    for r in rows(by_number.values()):
        a = by_number[r.number]
        w.writerow([_blank(a.phase_id), r.number, r.title, r.change, r.result, a.state,
                    _blank(a.reason), _blank(a.delta_ms), _blank(a.ci_low), _blank(a.ci_high),
                    _blank(a.delta_pct), _blank(a.estimate_ms), _blank(a.commit_sha),
                    _blank(a.tokens), _blank(a.cost_usd)])
    return buf.getvalue()


def _blank(x) -> str:
    return "" if x is None else str(x)


def json_obj(attempts: Iterable[Attempt], phases=(), scores: Sequence[Score] = ()) -> dict:
    """The journey as one JSON-ready object: phases with their rows and summaries, scores."""
    attempts = list(attempts)
    by_number = {a.number: a for a in attempts}
    pm = _phase_map(phases)
    out = []
    for sec in _sections(attempts, phases, scores, "en"):
        p = pm.get(sec.phase_id)
        out.append({
            "phase": sec.phase_id,
            "definition": p.definition if p else None,
            "started_at": (p.started_at or None) if p else None,
            "comparable_across_phases": False,
            "merged": sec.merged, "attempts": len(sec.rows), "gain_ms": round(sec.gain_ms, 6),
            "main_first_ms": sec.first_score, "main_last_ms": sec.last_score,
            "rows": [{"#": r.number, "attempt": r.title, "score_change_ms": r.delta_ms
                      if r.change else None, "result": r.result, "state": r.state,
                      "reason": by_number[r.number].reason,
                      "ci_ms": [by_number[r.number].ci_low, by_number[r.number].ci_high],
                      "estimate_ms": by_number[r.number].estimate_ms,
                      "waiting_on": by_number[r.number].waiting_on,
                      "commit_sha": by_number[r.number].commit_sha}
                     for r in sec.rows],
        })
    return {"columns": list(TEXT["en"]["cols"]), "phases": out,
            "scores": [asdict(s) for s in scores or ()]}


# --------------------------------------------------------------------------- plot + HTML
def _parse_time(text) -> datetime | None:
    try:
        t = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo is not None else None  # naive stamps do not order against aware ones


# What an attempt's marker says, in legend order: (kind, legend label, colour, marker). The
# colours are Okabe-Ito's (told apart with the common colour blindnesses), the shapes differ too.
KINDS = (
    ("merged", "merged", "#009E73", "o"),
    ("within noise", "within noise", "#8C8C8C", "o"),
    ("slower", "slower", "#E69F00", "^"),
    ("guard", "guard", "#CC79A7", "v"),
    ("accuracy", "abandoned: accuracy", "#D55E00", "X"),
    ("scorer check", "scorer check", "#882255", "D"),
    ("scope", "scope", "#56B4E9", "s"),
    ("conflict", "conflict", "#0072B2", "P"),
    ("crashed", "crashed", "#000000", "x"),
    ("timed out", "timed out", "#8C6D31", "d"),
    ("other", "abandoned: other reason", "#555555", "h"),
    ("not done", "not done (declined)", "#BBBBBB", "."),
    ("in flight", "in flight", "#44AA99", "*"),
)
_KIND = {k[0]: k for k in KINDS}


def outcome_kind(a: Attempt) -> str:
    """The marker's kind for one attempt (one of :data:`KINDS`)."""
    if a.state == MERGED:
        return "merged"
    if a.state == ABANDONED:
        r = a.reason or ""
        return r if r in _KIND and r not in ("merged", "crashed", "timed out", "not done",
                                              "in flight", "other") else "other"
    if a.state in (CRASHED, TIMED_OUT, NOT_DONE):
        return a.state
    return "in flight"  # queued, running, judging, waiting


@dataclass(frozen=True)
class PlotPoint:
    x: int  # the attempt's position within its phase, from 1
    number: int  # its ledger number
    kind: str
    y: float | None  # its B score (ms; or its change, in a panel of changes); None: not measured
    low: float | None  # the interval around y (ci_low, ci_high placed the same way)
    high: float | None


@dataclass(frozen=True)
class Panel:
    phase_id: int | None
    title: str
    unit: str  # "score": y is a score in ms, main drawn; "change": y is B − A (no score known)
    points: tuple
    main: tuple  # ((x, score_ms), ...): main's score from x on (a step that drops at a merge)
    count: int


def _weighted(medians, definition: dict | None) -> float | None:
    """The score of per-bucket medians under the phase's buckets and weights (None if any is
    missing): stats.score's weighted mean, done here so the journey stays free of gates."""
    d = definition or {}
    buckets, weights = d.get("buckets"), d.get("weights")
    if not isinstance(medians, Mapping) or not buckets or not weights or len(buckets) != len(weights):
        return None
    try:
        vals = [float(medians[str(b)]) for b in buckets]
        return sum(w * v for w, v in zip(weights, vals)) / sum(weights)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def _main_steps(atts: list, ss: list) -> list:
    """Main's score records of one phase placed on the attempt axis: a merge's score at its
    attempt's x, a re-measured baseline just before the first attempt that finished after it
    was recorded (x + 0.5 past the last one finished before)."""
    pos = {}
    for i, a in enumerate(atts, 1):
        if a.state == MERGED:
            for sha in (a.commit_sha, a.merged_sha):
                if sha:
                    pos[sha] = i
    done = [_parse_time(a.finished_at) for a in atts if a.finished_at]
    ordered = all(t is not None for t in done)  # attempts still in flight finish later
    out, last_x = [], 0.5
    for s in ss:
        if s.sha in pos:
            x = float(pos[s.sha])
        else:
            at = _parse_time(s.at)
            if at is not None and ordered:
                x = 0.5 + sum(1 for t in done if t <= at)
            else:
                x = last_x  # times that do not order: keep the records' own order
        x = max(x, last_x)
        out.append((x, s.score_ms))
        last_x = x
    return out


def _main_at(steps: list, x: float) -> float | None:
    v = None
    for sx, sy in steps:
        if sx <= x:
            v = sy
    return v


def plot_panels(attempts: Iterable[Attempt], phases=(), scores: Sequence[Score] = ()) -> list[Panel]:
    """What the plot draws, one panel per phase (pure). Each attempt sits at its position in
    its phase; a measured one at its B score, placed as A's score of its own A/B (from its
    recorded medians and the phase's weights, else main's score at the time) plus its change,
    the interval placed the same way; attempts never measured have y None."""
    pm = _phase_map(phases)
    scores = list(scores or ())
    by_phase: dict = {}
    for a in sorted(attempts, key=lambda a: a.number):
        by_phase.setdefault(a.phase_id, []).append(a)
    for s in scores:
        by_phase.setdefault(s.phase_id, [])
    out = []
    for pid in sorted(by_phase, key=lambda p: (p is None, p or 0)):
        atts = by_phase[pid]
        ss = [s for s in scores if s.phase_id == pid]
        definition = pm[pid].definition if pid in pm else None
        steps = _main_steps(atts, ss)
        has_scale = bool(steps) or any(_weighted(a.medians_a, definition) is not None for a in atts)
        pts = []
        for i, a in enumerate(atts, 1):
            kind = outcome_kind(a)
            y = lo = hi = None
            if a.delta_ms is not None and a.state in (MERGED, ABANDONED):
                ref = _weighted(a.medians_a, definition) if has_scale else 0.0
                if ref is None:
                    ref = _main_at(steps, i - 0.5)
                if ref is not None:
                    y = ref + a.delta_ms
                    if a.ci_low is not None and a.ci_high is not None:
                        lo, hi = ref + a.ci_low, ref + a.ci_high
            pts.append(PlotPoint(i, a.number, kind, y, lo, hi))
        merged = sum(1 for a in atts if a.state == MERGED)
        title = ("no phase recorded" if pid is None else f"Phase {pid}") + \
            f" · {len(atts)} attempt{'s' if len(atts) != 1 else ''} · {merged} merged"
        out.append(Panel(pid, title, "score" if has_scale else "change", tuple(pts),
                         tuple(steps), len(atts)))
    return out


def marker_style(n: int) -> dict:
    """Marker size, error-bar width, opacity and label policy for ``n`` attempts in a panel:
    big and labelled for a handful, small and translucent for hundreds."""
    n = max(1, n)
    return {"ms": max(2.5, min(8.0, 8.0 * (25 / n) ** 0.5)), "elw": 1.2 if n <= 60 else 0.6,
            "alpha": 0.9 if n <= 100 else 0.6, "cap": 3 if n <= 40 else 0, "label_merges": n <= 60}


def plot_png(attempts: Iterable[Attempt], phases=(), scores: Sequence[Score] = ()) -> bytes | None:
    """The journey's plot: one panel per phase (their scores are not comparable), x the
    attempt's position in its phase; main's score as a step line that drops at each merge;
    every attempt a marker coloured by its result at its B score with its interval as an error
    bar, the attempts never measured (accuracy, scope, crashes…) in a strip along the bottom.
    None when there is neither an attempt nor a score.

    Uses matplotlib's object API on the Agg canvas, never pyplot, so it touches no global
    backend state of the calling process; the PNG carries no metadata, so it is reproducible.
    """
    panels = plot_panels(attempts, phases, scores)
    if not panels:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(9, 0.9 + 2.9 * len(panels)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    seen = set()
    for ax, pan in zip(axes, panels):
        sz = marker_style(pan.count)
        n = max(1, pan.count)
        right = n + 0.5
        if pan.main:
            xs = [x for x, _ in pan.main] + [right]
            ys = [y for _, y in pan.main] + [pan.main[-1][1]]
            ax.step(xs, ys, where="post", color="#2b6cb0", linewidth=1.6, zorder=2)
        measured = [p for p in pan.points if p.y is not None]
        if not pan.main and measured:  # changes without a score: against zero
            ax.axhline(0.0, color="#2b6cb0", linewidth=1.0, linestyle=":", zorder=1)
        strip = [p for p in pan.points if p.y is None]
        for kind, _, colour, marker in KINDS:
            ps = [p for p in measured if p.kind == kind]
            if ps:
                seen.add(kind)
                bars = [p for p in ps if p.low is not None]
                if bars:
                    seen.add("interval")
                    ax.errorbar([p.x for p in bars], [p.y for p in bars],
                                yerr=[[p.y - p.low for p in bars], [p.high - p.y for p in bars]],
                                fmt="none", ecolor=colour, elinewidth=sz["elw"], capsize=sz["cap"],
                                alpha=sz["alpha"], zorder=3)
                top = kind == "merged"  # the few that matter most: never faded, drawn on top
                ax.plot([p.x for p in ps], [p.y for p in ps], linestyle="none", marker=marker,
                        color=colour, markersize=sz["ms"] * (1.3 if top else 1.0),
                        alpha=1.0 if top else sz["alpha"], zorder=5 if top else 4,
                        markeredgewidth=0.8 if marker in "x." else 0.4, markeredgecolor=colour
                        if marker in "x." else "white")
            qs = [p for p in strip if p.kind == kind]
            if qs:
                seen.add(kind)
                ax.plot([p.x for p in qs], [0.06] * len(qs), linestyle="none", marker=marker,
                        color=colour, markersize=sz["ms"], alpha=sz["alpha"], zorder=4,
                        transform=ax.get_xaxis_transform(), clip_on=False)
        if sz["label_merges"]:
            for p in measured:
                if p.kind == "merged":
                    ax.annotate(f"#{p.number}", (p.x, p.y), textcoords="offset points",
                                xytext=(4, 4), fontsize=7, color="#22543d", zorder=5)
        # the data above the strip: the lowest 16 % of the panel holds the unmeasured attempts
        vals = [v for p in measured for v in (p.y, p.low, p.high) if v is not None]
        vals += [y for _, y in pan.main]
        if pan.unit == "change" and vals:
            vals.append(0.0)
        if vals:
            lo, hi = min(vals), max(vals)
            span = (hi - lo) or max(abs(hi) * 0.02, 0.01)
            ax.set_ylim(lo - 0.25 * span, hi + 0.1 * span)
        else:
            ax.set_yticks([])
            ax.text(0.5, 0.55, "no score measured in this phase", transform=ax.transAxes,
                    ha="center", va="center", fontsize=8, color="#718096")
        if strip:
            ax.plot([0, 1], [0.13, 0.13], color="#cbd5e0", linewidth=0.8, linestyle="--",
                    zorder=1, transform=ax.transAxes)
            ax.text(0.005, 0.145, "not measured", transform=ax.transAxes, fontsize=6.5,
                    color="#718096", va="bottom")
        ax.set_xlim(0.4, right + 0.1)
        if n <= 12:
            ax.set_xticks(range(1, n + 1))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
        ax.set_title(pan.title, fontsize=9, loc="left")
        ax.set_ylabel("" if not vals else "score (ms)" if pan.unit == "score"
                      else "score change B − A (ms)", fontsize=8)
        labelled = sz["label_merges"] and any(p.kind == "merged" for p in measured)
        ax.set_xlabel("attempt in this phase" + (" (#n: a merge's ledger number)"
                                                  if labelled else ""), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color="#2b6cb0", linewidth=1.6, label="main's score")] if any(
        p.main for p in panels) else []
    handles += [Line2D([], [], linestyle="none", marker=m, color=c, markersize=6, label=lab)
                for k, lab, c, m in KINDS if k in seen]
    if "interval" in seen:
        handles.append(Line2D([], [], color="#555555", linewidth=1.0, marker="|", markersize=8,
                              label="95 % interval of B − A"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(5, len(handles)),
               fontsize=7.5, frameon=False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI","PingFang SC","Noto Sans CJK SC",sans-serif;
margin:2rem auto;max-width:980px;color:#1a202c;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.15rem;margin-top:2rem}
.note{color:#718096;font-style:italic;font-size:.9rem}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{border-bottom:1px solid #e2e8f0;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f7fafc}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.merged td{background:#f0fff4}tr.abandoned td,tr.crashed td,tr.timed-out td{color:#4a5568}
.summary{font-weight:600}img{max-width:100%}
"""


def html(attempts: Iterable[Attempt], phases=(), scores: Sequence[Score] = (), lang: str = "en",
         title: str | None = None) -> str:
    """A self-contained page: inline CSS, the tables, the plot as a base64 PNG; no external
    reference of any kind, so it can be mailed or archived as one file."""
    _check_lang(lang)
    t = TEXT[lang]
    e = _html.escape
    attempts = list(attempts)
    head = title or t["title"]
    body = [f"<h1>{e(head)}</h1>"]
    png = plot_png(attempts, phases, scores)
    body.append(f"<h2>{e(t['plot'])}</h2>")
    if png:
        body.append(f'<img alt="{e(t["plot"])}" src="data:image/png;base64,'
                    f'{base64.b64encode(png).decode()}">')
    else:
        body.append(f"<p class=note>{e(t['no_scores'])}</p>")
    secs = _sections(attempts, phases, scores, lang)
    if not secs:
        body.append(f"<p>{e(t['empty'])}</p>")
    for sec in secs:
        body += [f"<h2>{e(sec.heading)}</h2>", f"<p class=note>{e(t['note'])}</p>", "<table>",
                 "<tr>" + "".join(f"<th>{e(c)}</th>" for c in t["cols"]) + "</tr>"]
        for r in sec.rows:
            body.append(f'<tr class="{e(r.state.replace(" ", "-"))}"><td class=num>{r.number}</td><td>{e(r.title)}</td>'
                        f"<td class=num>{e(r.change)}</td><td>{e(r.result)}</td></tr>")
        body += ["</table>", f"<p class=summary>{e(_summary(sec, lang))}</p>"]
    return ("<!DOCTYPE html>\n"
            f'<html lang="{lang}"><head><meta charset="utf-8">'
            f"<title>{e(head)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
