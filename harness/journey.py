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

SCORER_CHECK = "scorer check"  # pipeline.decide_outcome's reason when a scorer check failed

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
        "plot": "Main's score after each merge",
        "no_scores": "No score recorded yet.",
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
        "plot": "每次合并后主分支的分数",
        "no_scores": "尚无分数记录。",
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
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


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
def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None


def plot_png(attempts: Iterable[Attempt], phases=(), scores: Sequence[Score] = ()) -> bytes | None:
    """Main's score over time, one panel per phase (their scores are not comparable), each
    point labelled with the attempt whose merge produced it. None when no score exists.

    Uses matplotlib's object API on the Agg canvas, never pyplot, so it touches no global
    backend state of the calling process; the PNG carries no metadata, so it is reproducible.
    """
    scores = list(scores or ())
    if not scores:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    # (phase, sha) -> the attempt whose merge made it; a phase's first score at an older
    # merge is a re-measured baseline, labelled by its SHA instead
    by_sha = {}
    for a in attempts:
        if a.state == MERGED:
            for sha in (a.commit_sha, a.merged_sha):
                if sha:
                    by_sha[(a.phase_id, sha)] = a.number
    pids = sorted({s.phase_id for s in scores})
    fig = Figure(figsize=(8, 2.8 * len(pids)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(pids), 1, squeeze=False)[:, 0]
    for ax, pid in zip(axes, pids):
        ss = [s for s in scores if s.phase_id == pid]
        times = [_parse_time(s.at) for s in ss]
        xs = times if all(times) and len({t.tzinfo is None for t in times}) == 1 else list(range(len(ss)))
        ys = [s.score_ms for s in ss]
        ax.step(xs, ys, where="post", color="#2b6cb0", linewidth=1.5)
        ax.plot(xs, ys, "o", color="#2b6cb0", markersize=4)
        for x, y, s in zip(xs, ys, ss):
            n = by_sha.get((pid, s.sha))
            ax.annotate(f"#{n}" if n is not None else s.sha[:7], (x, y), textcoords="offset points",
                        xytext=(3, 5), fontsize=7, color="#444")
        ax.set_title(f"Phase {pid}", fontsize=9, loc="left")
        ax.set_ylabel("main score (ms)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        if xs and isinstance(xs[0], datetime):
            loc = AutoDateLocator()
            ax.xaxis.set_major_locator(loc)
            ax.xaxis.set_major_formatter(ConciseDateFormatter(loc))
        else:
            ax.set_xlabel("score record", fontsize=8)
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
