"""The journey as text: Markdown (the published format), CSV and JSON. Pure functions of the
ledger's records; the attempts that tried nothing are left out (:func:`.rows.tried_nothing`),
and the Markdown and JSON say which."""
from __future__ import annotations

import csv
import io
from dataclasses import asdict
from typing import Iterable, Mapping, Sequence

from ..ledger import Attempt, Score
from .page import AttemptFiles, commands, diff_missing, diff_stats, hidden_text, reasons, wall_s
from .rows import judgment_view, not_shown_line, phase_map, remeasured, rows, sections, shown, summary
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
    out += [t["estimator"], ""]
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
    """One line per journey row: the journey's columns, then the raw numbers behind them and
    the page's other columns (target, backend, times, the re-measured change, the commands)."""
    check_lang(lang)
    t = TEXT[lang]
    by_number = {a.number: a for a in attempts}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([t["phase_col"], *t["cols"], "state", "reason", "delta_ms", "ci_low", "ci_high",
                "delta_pct", "estimate_ms", "commit_sha", "tokens", "cost_usd", "target", "backend",
                "base_sha", "created_at", "finished_at", "wall_s", "remeasured_delta_ms",
                "remeasured_ci_low", "remeasured_ci_high", "hidden", "show", "replay"])
    for r in rows(by_number.values(), lang):
        a = by_number[r.number]
        again = remeasured(a)
        ci = tuple(again.ci or ()) + (None, None) if again is not None else (None, None)
        cmd = commands(a)
        w.writerow([_blank(a.phase_id), r.number, r.title, r.change, r.result, a.state,
                    _blank(a.reason), _blank(a.delta_ms), _blank(a.ci_low), _blank(a.ci_high),
                    _blank(a.delta_pct), _blank(a.estimate_ms), _blank(a.commit_sha),
                    _blank(a.tokens), _blank(a.cost_usd), a.target, a.backend, _blank(a.base_sha),
                    _blank(a.created_at), _blank(a.finished_at), _blank(wall_s(a)),
                    _blank(again.delta_ms if again else None), _blank(ci[0]), _blank(ci[1]),
                    hidden_text(a.hidden, lang) if a.hidden else "", cmd["show"],
                    " ; ".join(cmd["replay"])])
    return buf.getvalue()


def _blank(x) -> str:
    return "" if x is None else str(x)


def _row_json(r, a: Attempt, files: AttemptFiles | None) -> dict:
    """A journey row with every field the table, the page's detail and the CSV show."""
    files = files or AttemptFiles()
    again = remeasured(a)
    diff = None
    if files.diff:
        nf, add, rem = diff_stats(files.diff)
        diff = {"files": nf, "added": add, "removed": rem}
    return {
        "#": r.number, "attempt": r.title, "score_change_ms": r.delta_ms if r.change else None,
        "result": r.result, "state": r.state, "reason": a.reason,
        "delta_ms": a.delta_ms, "ci_ms": [a.ci_low, a.ci_high], "delta_pct": a.delta_pct,
        "remeasured": None if again is None else {
            "delta_ms": again.delta_ms, "ci_ms": list(tuple(again.ci or ()) + (None, None))[:2],
            "delta_pct": again.delta_pct, "hidden": again.hidden},
        "estimate_ms": a.estimate_ms, "waiting_on": a.waiting_on,
        "target": a.target, "backend": a.backend, "base_sha": a.base_sha,
        "commit_sha": a.commit_sha, "merged_sha": a.merged_sha,
        "tokens": a.tokens, "cost_usd": a.cost_usd,
        "created_at": a.created_at, "finished_at": a.finished_at, "wall_s": wall_s(a),
        "host": a.host, "slot": a.slot, "rerun_of": a.rerun_of, "parts": a.parts,
        "hidden": a.hidden, "hidden_text": hidden_text(a.hidden) if a.hidden else None,
        "reasons": [{"text": x[0], "items": x[1]} if isinstance(x, tuple) else {"text": x, "items": []}
                    for x in reasons(a, files.judgment)],
        # the A/B per bucket (and its re-measurement's, under "reverify"), as kern show --json
        "measured": judgment_view(a, files.judgment).to_dict(),
        "brief": f"runs/attempts/{a.number}/brief.md" if files.brief else None,
        "diff": diff, "diff_missing": diff_missing(a, files) or None,
        "commands": commands(a),
    }


def json_obj(attempts: Iterable[Attempt], phases=(), scores: Sequence[Score] = (),
             files: Mapping[int, AttemptFiles] | None = None) -> dict:
    """The journey as one JSON-ready object: how a change is estimated, phases with their
    rows (every field the CSV and the page show; ``files`` as the page takes them) and
    summaries, scores."""
    attempts = list(attempts)
    files = files or {}
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
            "rows": [_row_json(r, by_number[r.number], files.get(r.number)) for r in sec.rows],
            "tried_nothing": list(sec.not_shown),
        })
    return {"estimator": TEXT["en"]["estimator"].replace("`", ""),
            "columns": list(TEXT["en"]["cols"]), "phases": out,
            "scores": [asdict(s) for s in scores or ()]}
