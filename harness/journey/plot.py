"""The journey's plot: what it draws (pure :func:`plot_panels`), drawn as SVG for the page
(:func:`svg`, pure text) and as a PNG for ``kern report --plot`` (:func:`plot_png`, matplotlib).

One panel per phase (scores of different phases are not comparable); x is the attempt's
position among its phase's journey rows. Main's score is a line from the phase's start through
every merge; a measured attempt sits at its B score with the interval of B − A; an attempt that
was never measured (accuracy, scope, a crash …) sits in a strip of its own below the x axis,
marked by its result, so it never reads as a score.
"""
from __future__ import annotations

import html as _html
import io
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping, Sequence

from ..ledger import (ABANDONED, CRASHED, IN_FLIGHT, INTERRUPTED, MERGED, NOT_DONE, TIMED_OUT,
                      WAITING, Attempt, Score, mains)
from .rows import TEXT, phase_map, shown

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
    ("interrupted", "interrupted", "#999933", "p"),
    ("other", "abandoned: other reason", "#555555", "h"),
    ("not done", "not done (declined)", "#BBBBBB", "."),
    ("in flight", "in flight", "#44AA99", "*"),
)
_KIND = {k[0]: k for k in KINDS}
MAIN_COLOUR = "#2b6cb0"


def outcome_kind(a: Attempt) -> str:
    """The marker's kind for one attempt (one of :data:`KINDS`)."""
    if a.state == MERGED:
        return "merged"
    if a.state == ABANDONED:
        r = a.reason or ""
        return r if r in _KIND and r not in ("merged", "crashed", "timed out", "interrupted", "not done",
                                              "in flight", "other") else "other"
    if a.state in (CRASHED, TIMED_OUT, INTERRUPTED, NOT_DONE):
        return a.state
    if a.state in (*IN_FLIGHT, WAITING):
        return "in flight"
    return "other"  # the ledger's states are all above; a later one reads as ended


@dataclass(frozen=True)
class PlotPoint:
    x: int  # the attempt's position within its phase's journey rows, from 1
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
    main: tuple  # ((x, score_ms), ...): main's score from x on; the first at 0.5, the phase's start
    count: int
    merged: int = 0


def _parse_time(text) -> datetime | None:
    try:
        t = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo is not None else None  # naive stamps do not order against aware ones


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


def _main_steps(atts: list, ss: list, definition: dict | None) -> list:
    """Main's score records of one phase placed on the attempt axis, starting at the phase's
    start (x = 0.5): a merge's score at its attempt's x; any other record (a re-measured
    baseline) just before the first attempt that finished after it was recorded. Main's score
    holds from the phase's start until a merge changes it, so the first level starts at 0.5:
    a baseline measured late (by the first A/B of the phase) is the score main had all along;
    when the first record is a merge's, the level before it is that attempt's own A side."""
    pos, by_x = {}, {}
    for i, a in enumerate(atts, 1):
        if a.state == MERGED:
            by_x[i] = a
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
                # a baseline is recorded while an attempt is judged, before that attempt
                # finishes: a tie of the seconds puts it before the attempt
                x = 0.5 + sum(1 for t in done if t < at)
            else:
                x = last_x  # times that do not order: keep the records' own order
        x = max(x, last_x)
        if not out and x > 0.5:
            a = by_x.get(int(x)) if x == int(x) else None
            if a is None:
                x = 0.5  # a baseline: main's score since the phase began
            else:
                before = _weighted(a.medians_a, definition)
                if before is None and a.delta_ms is not None:
                    before = s.score_ms - a.delta_ms
                if before is not None:
                    out.append((0.5, before))
        out.append((x, s.score_ms))
        last_x = x
    return out


def _b_score(a: Attempt, definition: dict | None, at_sha: dict) -> float | None:
    """B's own score in ``a``'s A/B (the weights' mean of its medians), which is main's score
    after a merge (harness/pipeline.py records it so): a merged marker sits on main's line.
    A merged attempt without recorded medians takes main's score at its commit."""
    y = _weighted(a.medians_b, definition)
    if y is None and a.state == MERGED:
        y = next((at_sha[s] for s in (a.merged_sha, a.commit_sha) if s in at_sha), None)
    return y


def _main_at(steps: list, x: float) -> float | None:
    v = None
    for sx, sy in steps:
        if sx <= x:
            v = sy
    return v


def plot_panels(attempts: Iterable[Attempt], phases=(), scores: Sequence[Score] = (),
                lang: str = "en") -> list[Panel]:
    """What the plot draws, one panel per phase (pure). Each journey row sits at its position
    in its phase; a measured one at its B score (its A/B's B medians under the phase's
    weights; a merge without them at main's score of its commit; else A's score, or main's at
    the time, plus its change), the interval of B − A placed around it; attempts never
    measured have y None. B − A is the scorer's paired estimate, so B's score need not be A's
    plus it: the marker is where B measured, and a merge sits on main's line."""
    t = TEXT[lang]
    pm = phase_map(phases)
    scores = list(scores or ())
    by_phase: dict = {}
    for a in shown(attempts):
        by_phase.setdefault(a.phase_id, []).append(a)
    for s in scores:
        by_phase.setdefault(s.phase_id, [])
    out = []
    for pid in sorted(by_phase, key=lambda p: (p is None, p or 0)):
        atts = by_phase[pid]
        ss = mains(s for s in scores if s.phase_id == pid)
        definition = pm[pid].definition if pid in pm else None
        steps = _main_steps(atts, ss, definition)
        has_scale = bool(steps) or any(_weighted(a.medians_a, definition) is not None for a in atts)
        at_sha = {s.sha: s.score_ms for s in ss}
        pts = []
        for i, a in enumerate(atts, 1):
            kind = outcome_kind(a)
            y = lo = hi = None
            if a.delta_ms is not None and a.state in (MERGED, ABANDONED):
                y = _b_score(a, definition, at_sha) if has_scale else a.delta_ms
                if y is None:
                    ref = _weighted(a.medians_a, definition)
                    if ref is None:
                        ref = _main_at(steps, i - 0.5)
                    y = None if ref is None else ref + a.delta_ms
                if y is not None and a.ci_low is not None and a.ci_high is not None:
                    shift = y - a.delta_ms  # where B − A's zero sits; 0 in a panel of changes
                    lo, hi = a.ci_low + shift, a.ci_high + shift
            pts.append(PlotPoint(i, a.number, kind, y, lo, hi))
        merged = sum(1 for a in atts if a.state == MERGED)
        phase = t["unknown_phase"] if pid is None else f"{t['phase']} {pid}"
        title = t["panel"].format(phase=phase, n=len(atts), merged=merged,
                                  attempts=t["attempts_word"][len(atts) != 1])
        out.append(Panel(pid, title, "score" if has_scale else "change", tuple(pts),
                         tuple(steps), len(atts), merged))
    return out


def marker_style(n: int) -> dict:
    """Marker size, error-bar width, opacity and label policy for ``n`` attempts in a panel:
    big and labelled for a handful, small and translucent for hundreds."""
    n = max(1, n)
    return {"ms": max(2.5, min(8.0, 8.0 * (25 / n) ** 0.5)), "elw": 1.2 if n <= 60 else 0.6,
            "alpha": 0.9 if n <= 100 else 0.6, "cap": 3 if n <= 40 else 0, "label_merges": n <= 60}


def _limits(pan: Panel) -> tuple[float, float] | None:
    """The y range that holds the measured points, their intervals and main's line."""
    vals = [v for p in pan.points if p.y is not None for v in (p.y, p.low, p.high) if v is not None]
    vals += [y for _, y in pan.main]
    if pan.unit == "change" and vals:
        vals.append(0.0)
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or max(abs(hi) * 0.02, 0.01)
    return lo - 0.08 * span, hi + 0.08 * span


# --------------------------------------------------------------------------- SVG (the page)
def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round values (1, 2 or 5 times a power of ten apart) within [lo, hi]."""
    span = hi - lo
    if not (span > 0 and math.isfinite(span)):
        return [lo]
    raw = span / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".") if abs(v - round(v, 1)) < 1e-9 else f"{v:.2f}"


def _tick_label(v: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 0
    return f"{v:.{decimals}f}".replace("-", "\u2212")


def _shape(marker: str, r: float, colour: str) -> str:
    """One marker centred on (0, 0), ``r`` its radius in px."""
    fill = f'fill="{colour}" stroke="white" stroke-width="0.8"'
    line = f'fill="none" stroke="{colour}" stroke-linecap="round"'
    if marker == "o":
        return f'<circle r="{_num(r)}" {fill}/>'
    if marker == ".":
        return f'<circle r="{_num(r * 0.55)}" fill="{colour}"/>'
    if marker in "^v":
        s = 1 if marker == "^" else -1
        return (f'<path d="M0 {_num(-s * r * 1.15)} L{_num(r)} {_num(s * r * 0.7)} '
                f'L{_num(-r)} {_num(s * r * 0.7)} Z" {fill}/>')
    if marker in "Dd":
        w = r if marker == "D" else r * 0.65
        return f'<path d="M0 {_num(-r * 1.1)} L{_num(w)} 0 L0 {_num(r * 1.1)} L{_num(-w)} 0 Z" {fill}/>'
    if marker == "s":
        return f'<rect x="{_num(-r * 0.85)}" y="{_num(-r * 0.85)}" width="{_num(r * 1.7)}" height="{_num(r * 1.7)}" {fill}/>'
    if marker in "xX":
        k = r * 0.8
        w = 2.6 if marker == "X" else 1.4
        return f'<path d="M{_num(-k)} {_num(-k)} L{_num(k)} {_num(k)} M{_num(-k)} {_num(k)} L{_num(k)} {_num(-k)}" {line} stroke-width="{w}"/>'
    if marker == "+":
        return f'<path d="M{_num(-r)} 0 L{_num(r)} 0 M0 {_num(-r)} L0 {_num(r)}" {line} stroke-width="1.4"/>'
    if marker == "P":
        return f'<path d="M{_num(-r)} 0 L{_num(r)} 0 M0 {_num(-r)} L0 {_num(r)}" {line} stroke-width="2.6"/>'
    if marker == "h":
        pts = " ".join(f"{_num(r * math.cos(math.pi / 3 * i + math.pi / 6))},{_num(r * math.sin(math.pi / 3 * i + math.pi / 6))}"
                       for i in range(6))
        return f'<polygon points="{pts}" {fill}/>'
    if marker == "p":  # a pentagon
        pts = " ".join(f"{_num(r * math.sin(2 * math.pi / 5 * i))},{_num(-r * math.cos(2 * math.pi / 5 * i))}"
                       for i in range(5))
        return f'<polygon points="{pts}" {fill}/>'
    # "*": a five-pointed star
    pts = " ".join(f"{_num((r if i % 2 == 0 else r * 0.45) * math.sin(math.pi / 5 * i))},"
                   f"{_num(-(r if i % 2 == 0 else r * 0.45) * math.cos(math.pi / 5 * i))}" for i in range(10))
    return f'<polygon points="{pts}" {fill}/>'


def legend_swatch(kind: str) -> str:
    """A small inline SVG of a kind's marker (or main's line) for the page's legend."""
    if kind == "main":
        return (f'<svg class="swatch" width="22" height="12" aria-hidden="true"><path d="M1 6 H21" '
                f'stroke="{MAIN_COLOUR}" stroke-width="2"/></svg>')
    if kind == "interval":
        return ('<svg class="swatch" width="12" height="14" aria-hidden="true"><path d="M6 1 V13 M3 1 H9 M3 13 H9" '
                'stroke="#555" stroke-width="1.2"/></svg>')
    _, _, colour, marker = _KIND[kind]
    return (f'<svg class="swatch" width="14" height="14" aria-hidden="true"><g transform="translate(7,7)">'
            f'{_shape(marker, 5, colour)}</g></svg>')


# the SVG's geometry (px of its viewBox)
W, LEFT, RIGHT, TOP, PLOT_H = 900, 88, 18, 14, 220
AXIS_Y = TOP + PLOT_H
STRIP_TOP, STRIP_H = AXIS_Y + 24, 26
H = STRIP_TOP + STRIP_H + 30


def svg(pan: Panel, tips: Mapping[int, str] | None = None, lang: str = "en") -> str:
    """One panel as an inline SVG (pure text, no script, no external reference). ``tips``: the
    tooltip of each attempt number. Classes the page and its test rely on: ``main-line`` (a
    path starting at the ``phase-start`` line), ``x-axis``, ``pt`` (one group an attempt, with
    ``data-n`` and ``data-kind``), ``unmeasured`` (those in the strip below the axis)."""
    t = TEXT[lang]
    e = _html.escape
    tips = tips or {}
    n = max(1, pan.count)
    x0, x1 = 0.4, n + 0.6

    def X(v: float) -> float:
        return LEFT + (v - x0) / (x1 - x0) * (W - LEFT - RIGHT)

    lim = _limits(pan)
    lo, hi = lim if lim else (0.0, 1.0)

    def Y(v: float) -> float:
        return TOP + (hi - v) / (hi - lo) * PLOT_H

    sz = marker_style(pan.count)
    r = sz["ms"] * 0.75
    out = [f'<svg class="plot" viewBox="0 0 {W} {H}" width="100%" role="img" '
           f'aria-label="{e(pan.title)}" data-phase="{"" if pan.phase_id is None else pan.phase_id}">',
           f'<rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{PLOT_H}" fill="#fbfdff" stroke="#e2e8f0"/>']
    if lim:
        ticks = nice_ticks(lo, hi, 5)
        step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
        for v in ticks:
            y = Y(v)
            out.append(f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{_num(y)}" y2="{_num(y)}" stroke="#edf2f7"/>'
                       f'<text x="{LEFT - 6}" y="{_num(y + 3.5)}" text-anchor="end" font-size="10" fill="#4a5568">'
                       f'{_tick_label(v, step)}</text>')
        label = t["y_score"] if pan.unit == "score" else t["y_change"]
        out.append(f'<text x="14" y="{TOP + PLOT_H / 2}" font-size="10.5" fill="#4a5568" text-anchor="middle" '
                   f'transform="rotate(-90 14 {TOP + PLOT_H / 2})">{e(label)}</text>')
    else:
        out.append(f'<text x="{W / 2}" y="{TOP + PLOT_H / 2}" text-anchor="middle" font-size="11" '
                   f'fill="#718096">{e(t["no_score_in_phase"])}</text>')
    # x axis with its ticks; the phase's start
    out.append(f'<line class="x-axis" x1="{LEFT}" x2="{W - RIGHT}" y1="{AXIS_Y}" y2="{AXIS_Y}" stroke="#4a5568"/>')
    every = max(1, math.ceil(n / 12))
    for i in range(1, n + 1):
        if (i - 1) % every == 0 or i == n:
            out.append(f'<text x="{_num(X(i))}" y="{AXIS_Y + 14}" text-anchor="middle" font-size="10" '
                       f'fill="#4a5568">{i}</text>')
    xs = _num(X(0.5))
    out.append(f'<line class="phase-start" x1="{xs}" x2="{xs}" y1="{TOP}" y2="{STRIP_TOP + STRIP_H}" '
               f'stroke="#a0aec0" stroke-dasharray="3 3"><title>{e(t["phase_start"])}</title></line>')
    # main's score: from the phase's start through every merge to the last attempt
    if pan.main and lim:
        d = f"M{xs} {_num(Y(pan.main[0][1]))}"
        for x, y in pan.main[1:]:
            d += f" H{_num(X(x))} V{_num(Y(y))}"
        d += f" H{_num(X(n + 0.5))}"
        out.append(f'<path class="main-line" d="{d}" fill="none" stroke="{MAIN_COLOUR}" stroke-width="2">'
                   f'<title>{e(t["main_line"])}: ' + " → ".join(f"{y:.3f}" for _, y in pan.main)
                   + " ms</title></path>")
    elif lim and pan.unit == "change":
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{_num(Y(0))}" y2="{_num(Y(0))}" '
                   f'stroke="{MAIN_COLOUR}" stroke-dasharray="2 3"/>')
    # the strip of attempts never measured, below the axis
    strip = [p for p in pan.points if p.y is None]
    out.append(f'<g class="strip"><rect x="{LEFT}" y="{STRIP_TOP}" width="{W - LEFT - RIGHT}" height="{STRIP_H}" '
               f'fill="#f7fafc" stroke="#e2e8f0"/><text x="{LEFT - 6}" y="{STRIP_TOP + STRIP_H / 2 + 3.5}" '
               f'text-anchor="end" font-size="9.5" fill="#718096">{e(t["not_measured"])}</text></g>')
    cy = STRIP_TOP + STRIP_H / 2
    order = {k[0]: i for i, k in enumerate(KINDS)}
    measured = sorted((p for p in pan.points if p.y is not None), key=lambda p: (p.kind == "merged", -order[p.kind]))
    for p in strip + measured:
        _, _, colour, marker = _KIND[p.kind]
        unmeasured = p.y is None
        px, py = X(p.x), cy if unmeasured else Y(p.y)
        bar = ""
        if not unmeasured and p.low is not None and p.high is not None:
            a, b = Y(p.high) - py, Y(p.low) - py
            cap = 3 if sz["cap"] else 0
            bar = (f'<path class="ci" d="M0 {_num(a)} V{_num(b)}' + (f" M{-cap} {_num(a)} H{cap} M{-cap} {_num(b)} H{cap}" if cap else "")
                   + f'" stroke="{colour}" stroke-width="{sz["elw"]}" fill="none" opacity="{sz["alpha"]}"/>')
        big = 1.3 if p.kind == "merged" else 1.0
        label = ""
        if p.kind == "merged" and sz["label_merges"] and not unmeasured:
            label = f'<text x="6" y="-6" font-size="9.5" fill="#22543d">#{p.number}</text>'
        out.append(f'<g class="pt{" unmeasured" if unmeasured else ""}" data-n="{p.number}" data-kind="{e(p.kind)}" '
                   f'transform="translate({_num(px)},{_num(py)})" tabindex="0"><title>{e(tips.get(p.number, f"#{p.number}"))}</title>'
                   f'{bar}{_shape(marker, r * big, colour)}{label}</g>')
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 8}" text-anchor="middle" font-size="10.5" '
               f'fill="#4a5568">{e(t["x_label"])}</text>')
    out.append("</svg>")
    return "\n".join(out)


# --------------------------------------------------------------------------- PNG (--plot)
def plot_png(attempts: Iterable[Attempt], phases=(), scores: Sequence[Score] = (),
             fmt: str = "png") -> bytes | None:
    """The journey's plot as a PNG (English): one panel per phase, each a score axis and below
    it the strip of attempts never measured; main's score a step line from the phase's start
    that drops at each merge; every measured attempt a marker coloured by its result at its B
    score with its interval as an error bar. None when there is neither an attempt nor a score.

    Uses matplotlib's object API on the Agg canvas, never pyplot, so it touches no global
    backend state of the calling process; the PNG carries no metadata, so it is reproducible.
    ``fmt``: ``png``, or ``svg`` for the same figure as an SVG file (``kern report --plot x.svg``).
    """
    panels = plot_panels(attempts, phases, scores)
    if not panels:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    t = TEXT["en"]
    fig = Figure(figsize=(9, 0.9 + 2.9 * len(panels)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.subplots(2 * len(panels), 1, squeeze=False,
                        gridspec_kw={"height_ratios": [5, 1] * len(panels)})[:, 0]
    seen = set()
    for k, pan in enumerate(panels):
        ax, sx = grid[2 * k], grid[2 * k + 1]
        sz = marker_style(pan.count)
        n = max(1, pan.count)
        right = n + 0.5
        if pan.main:
            xs = [x for x, _ in pan.main] + [right]
            ys = [y for _, y in pan.main] + [pan.main[-1][1]]
            ax.step(xs, ys, where="post", color=MAIN_COLOUR, linewidth=1.6, zorder=2)
        measured = [p for p in pan.points if p.y is not None]
        if not pan.main and measured:  # changes without a score: against zero
            ax.axhline(0.0, color=MAIN_COLOUR, linewidth=1.0, linestyle=":", zorder=1)
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
                sx.plot([p.x for p in qs], [0.5] * len(qs), linestyle="none", marker=marker,
                        color=colour, markersize=sz["ms"], alpha=sz["alpha"], zorder=4)
        if sz["label_merges"]:
            for p in measured:
                if p.kind == "merged":
                    ax.annotate(f"#{p.number}", (p.x, p.y), textcoords="offset points",
                                xytext=(4, 4), fontsize=7, color="#22543d", zorder=5)
        lim = _limits(pan)
        if lim:
            ax.set_ylim(*lim)
        else:
            ax.set_yticks([])
            ax.text(0.5, 0.5, t["no_score_in_phase"], transform=ax.transAxes,
                    ha="center", va="center", fontsize=8, color="#718096")
        for a in (ax, sx):
            a.set_xlim(0.4, right + 0.1)
            a.axvline(0.5, color="#a0aec0", linewidth=0.8, linestyle="--", zorder=1)
            if n <= 12:
                a.set_xticks(range(1, n + 1))
            else:
                a.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
            a.tick_params(labelsize=7)
        ax.tick_params(labelbottom=False)
        sx.set_ylim(0, 1)
        sx.set_yticks([])
        sx.set_facecolor("#f7fafc")
        sx.set_ylabel(t["not_measured"], fontsize=6.5, rotation=0, ha="right", va="center",
                      color="#718096")
        ax.set_title(pan.title, fontsize=9, loc="left")
        ax.set_ylabel("" if not lim else t["y_score"] if pan.unit == "score" else t["y_change"],
                      fontsize=8)
        labelled = sz["label_merges"] and any(p.kind == "merged" for p in measured)
        sx.set_xlabel(t["x_label"] + (" (#n: a merge's ledger number)" if labelled else ""), fontsize=8)
        ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color=MAIN_COLOUR, linewidth=1.6, label=t["main_line"])] if any(
        p.main for p in panels) else []
    handles += [Line2D([], [], linestyle="none", marker=m, color=c, markersize=6, label=lab)
                for k, lab, c, m in KINDS if k in seen]
    if "interval" in seen:
        handles.append(Line2D([], [], color="#555555", linewidth=1.0, marker="|", markersize=8,
                              label=t["interval"]))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(5, len(handles)),
               fontsize=7.5, frameon=False)
    buf = io.BytesIO()  # fmt "svg": the same figure as vector text, no date in it either
    fig.savefig(buf, format=fmt, metadata={"Software": None} if fmt == "png" else {"Date": None})
    return buf.getvalue()
