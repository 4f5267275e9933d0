"""The journey as text: Markdown (the published format), CSV and JSON. Pure functions of the
ledger's records; the attempts that tried nothing are left out (:func:`.rows.tried_nothing`),
and the Markdown and JSON say which."""
from __future__ import annotations

import csv
import io
from dataclasses import asdict
from typing import Iterable, Sequence

from ..ledger import Attempt, Score
from .rows import not_shown_line, phase_map, rows, sections, shown, summary
from .text import TEXT, check_lang


def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown(attempts: Iterable[Attempt], phases=(), lang: str = "en",
             scores: Sequence[Score] = ()) -> str:
    """One table per phase, its note and summary line, under a title."""
    check_lang(lang)
    t = TEXT[lang]
    out = [f"# {t['title']}", ""]
    secs = sections(attempts, phases, scores, lang)
    if not secs:
        return "\n".join(out + [t["empty"], ""])
    for sec in secs:
        out += [f"## {sec.heading}", "", f"*{t['note']}*", "",
                "| " + " | ".join(t["cols"]) + " |", "|---:|---|---:|---|"]
        out += [f"| {r.number} | {_md_cell(r.title)} | {r.change} | {_md_cell(r.result)} |"
                for r in sec.rows]
        out += ["", summary(sec, lang), ""]
        if sec.not_shown:
            out += [not_shown_line(sec, lang), ""]
    return "\n".join(out)


def csv_text(attempts: Iterable[Attempt], phases=(), lang: str = "en") -> str:
    """One line per journey row: the journey's columns, then the raw numbers behind them."""
    check_lang(lang)
    t = TEXT[lang]
    by_number = {a.number: a for a in attempts}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([t["phase_col"], *t["cols"], "state", "reason", "delta_ms", "ci_low", "ci_high",
                "delta_pct", "estimate_ms", "commit_sha", "tokens", "cost_usd"])
    for r in rows(by_number.values(), lang):
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
    by_number = {a.number: a for a in shown(attempts)}
    pm = phase_map(phases)
    out = []
    for sec in sections(attempts, phases, scores, "en"):
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
            "tried_nothing": list(sec.not_shown),
        })
    return {"columns": list(TEXT["en"]["cols"]), "phases": out,
            "scores": [asdict(s) for s in scores or ()]}
