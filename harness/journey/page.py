"""The journey as one self-contained HTML page (``kern report --format html``).

Per phase: the plot (inline SVG, :func:`.plot.svg`), then a table with a row per journey row:
its number, title, target, backend, commit, score change, result, wall time, tokens and cost.
Each row folds out a detail: what was tried (the brief, the hypothesis), the change per bucket
with its interval and % of the roofline floor, the re-measurement, where and when it was
judged, and the commit's diff. Columns sort on a click of their heading; a filter shows one
kind of result. Everything is inline (style, script, plot, diffs): no server, nothing fetched.

Pure: what lies on disk and in git beside the ledger row comes in as :class:`AttemptFiles`,
gathered by the shell (harness/cli/report.py ``attempt_files``).
"""
from __future__ import annotations

import html as _html
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping, Sequence

from gates.results import ScorerView, nested
from gates.summary import GateSummary

from ..ledger import ABANDONED, CRASHED, MERGED, NOT_DONE, TIMED_OUT, Attempt, Score
from ..progress import fmt_duration
from .plot import KINDS, legend_swatch, outcome_kind, plot_panels, svg
from .rows import (MINUS, describe, judgment_view, not_shown_line, phase_map, result, sections,
                   shown, signed, summary)
from .text import TEXT, check_lang

DIFF_LINES = 4000  # lines of one diff the page shows; the rest is named, not shown


@dataclass(frozen=True)
class AttemptFiles:
    """What an attempt left beside its ledger row, read by the shell: the brief it was given
    (``runs/attempts/<n>/brief.md``), the diff of its commit against its base (git), and its last
    judgment's full results (``runs/attempts/<n>/judgment-<k>.json``, parsed)."""
    brief: str | None = None
    diff: str | None = None
    diff_missing: str = ""  # why there is no diff ("" when there is one)
    judgment: dict | None = None


def diff_stats(diff: str) -> tuple[int, int, int]:
    """(files, lines added, lines removed) of a unified diff."""
    files = added = removed = 0
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            files += 1
        elif line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return files, added, removed


def wall_s(a: Attempt) -> float | None:
    """Seconds from the attempt's creation to its end (None while in flight or unrecorded)."""
    try:
        t0, t1 = datetime.fromisoformat(a.created_at), datetime.fromisoformat(a.finished_at)
    except (TypeError, ValueError):
        return None
    if (t0.tzinfo is None) != (t1.tzinfo is None):
        return None
    return max(0.0, (t1 - t0).total_seconds())


def fmt_wall(s: float | None, lang: str = "en") -> str:
    """``52 s``, ``4 min 12 s``, ``1 h 03 min`` (in ``lang``'s units)."""
    if s is None:
        return ""
    u = TEXT[lang]["units"]
    return fmt_duration(round(s), (u["s"], u["min"], u["h"]), " ")


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI","PingFang SC","Noto Sans CJK SC",sans-serif;
margin:1.5rem auto;max-width:1240px;color:#1a202c;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.15rem;margin-top:2.2rem}h3{font-size:1rem;margin:.2rem 0 .5rem}
h4{font-size:.9rem;margin:.8rem 0 .3rem}
.note{color:#718096;font-style:italic;font-size:.88rem}.summary{font-weight:600}
.controls{display:flex;gap:1rem;align-items:center;font-size:.9rem;margin:.6rem 0}
.hint{color:#718096;font-size:.85rem}
ul.legend{list-style:none;padding:0;margin:.2rem 0 .8rem;display:flex;flex-wrap:wrap;gap:.3rem 1rem;font-size:.82rem}
ul.legend li{display:flex;align-items:center;gap:.3rem}
svg.plot{display:block;max-width:100%;height:auto}svg.plot g.pt{cursor:pointer}
svg.plot g.pt:focus,svg.plot g.pt:hover{outline:none;filter:drop-shadow(0 0 2px #2b6cb0)}
table{border-collapse:collapse;width:100%;font-size:.86rem}
th,td{border-bottom:1px solid #e2e8f0;padding:.3rem .45rem;text-align:left;vertical-align:top}
th{background:#f7fafc;white-space:nowrap}th button{all:unset;cursor:pointer}
th[aria-sort=ascending] button::after{content:" \\25B2"}th[aria-sort=descending] button::after{content:" \\25BC"}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td code{font-size:.82rem}button.open{all:unset;cursor:pointer;color:#2b6cb0;white-space:nowrap}
button.open[aria-expanded=true]{font-weight:700}
tr.row.merged td{background:#f0fff4}tr.row.abandoned td,tr.row.crashed td,tr.row.timed-out td{color:#4a5568}
tr.filtered{display:none}tr.detail>td{background:#fcfcfd;padding:.6rem 1rem 1rem}
table.buckets{width:auto;font-size:.82rem;margin:.2rem 0}table.buckets td,table.buckets th{padding:.15rem .6rem}
table.buckets tr.total td{font-weight:600;border-top:2px solid #cbd5e0}
pre{background:#f7fafc;border:1px solid #e2e8f0;padding:.6rem;overflow:auto;max-height:32rem;font-size:.78rem;white-space:pre}
pre.brief{white-space:pre-wrap}details{margin:.4rem 0}summary{cursor:pointer;font-size:.86rem}
.add{color:#22543d;background:#f0fff4}.del{color:#742a2a;background:#fff5f5}.hunk{color:#6b46c1}.file{font-weight:700}
.meta{font-size:.84rem;color:#4a5568;margin:.2rem 0}
.estimator{font-size:.86rem;color:#2d3748;max-width:60rem}ul.why{font-size:.84rem;margin:.2rem 0}
"""

# Sorting (a click on a heading; empty cells last either way), the filter by result, the detail
# rows (a click on a row's number, or on its marker in the plot). No string here is shown.
_JS = """
(function(){
  function pairs(tb){return [...tb.querySelectorAll('tr.row')].map(r=>[r,document.getElementById(r.dataset.detail)]);}
  function sortBy(table, th){
    const i=[...th.parentNode.children].indexOf(th), num=th.dataset.type==='num';
    const dir=th.getAttribute('aria-sort')==='ascending'?'descending':'ascending';
    table.querySelectorAll('th[aria-sort]').forEach(h=>h.removeAttribute('aria-sort'));
    th.setAttribute('aria-sort',dir);
    const tb=table.tBodies[0], ps=pairs(tb), s=dir==='ascending'?1:-1;
    ps.sort((p,q)=>{
      const a=p[0].children[i].dataset.v, b=q[0].children[i].dataset.v;
      if(a===''||b==='') return (a==='')-(b==='');
      if(num) return s*((+a)-(+b)) || (+p[0].dataset.n)-(+q[0].dataset.n);
      return s*a.localeCompare(b) || (+p[0].dataset.n)-(+q[0].dataset.n);
    });
    ps.forEach(([r,d])=>{tb.appendChild(r); tb.appendChild(d);});
  }
  function toggle(row, open){
    const d=document.getElementById(row.dataset.detail), b=row.querySelector('button.open');
    open=open===undefined?d.hidden:open; d.hidden=!open; b.setAttribute('aria-expanded', String(open));
  }
  document.querySelectorAll('table.journey').forEach(t=>{
    t.querySelectorAll('th[data-type] button').forEach(b=>b.addEventListener('click',()=>sortBy(t,b.parentNode)));
    t.querySelectorAll('button.open').forEach(b=>b.addEventListener('click',()=>toggle(b.closest('tr'))));
  });
  document.querySelectorAll('svg.plot g.pt').forEach(g=>{
    const go=()=>{const r=document.getElementById('a-'+g.dataset.n); if(!r) return;
      if(r.classList.contains('filtered')) return; toggle(r,true); r.scrollIntoView({block:'center'});};
    g.addEventListener('click',go); g.addEventListener('keydown',e=>{if(e.key==='Enter') go();});
  });
  const f=document.getElementById('filter');
  if(f) f.addEventListener('change',()=>{
    document.querySelectorAll('tr.row').forEach(r=>{
      const out=f.value!=='' && r.dataset.kind!==f.value;
      r.classList.toggle('filtered',out);
      document.getElementById(r.dataset.detail).classList.toggle('filtered',out);
    });
  });
})();
"""

COLUMNS = ("n", "attempt", "target", "backend", "commit", "change", "result", "wall", "tokens", "cost")
NUMERIC = {"n", "change", "wall", "tokens", "cost"}


def _num_v(v) -> str:
    return "" if v is None else repr(float(v))


def _diff_html(diff: str) -> str:
    e = _html.escape
    lines = diff.splitlines()
    out = []
    for line in lines[:DIFF_LINES]:
        cls = ("file" if line.startswith(("diff --git", "+++", "---", "index ")) else
               "hunk" if line.startswith("@@") else "add" if line.startswith("+") else
               "del" if line.startswith("-") else "")
        out.append(f'<span class="{cls}">{e(line)}</span>' if cls else e(line))
    return "\n".join(out)


def _pct(v: float | None, decimals: int = 2) -> str:
    return "" if v is None else f"{v:+.{decimals}f} %".replace("-", MINUS)


def _bucket_table(m: ScorerView, n: int, lang: str) -> list[str]:
    """The table of one A/B: a row per bucket, then the score row, each figure recomputable
    from its neighbours (B − A = A × (B/A − 1) per bucket; the score row the weights' mean)."""
    t, e = TEXT[lang], _html.escape
    if not m.buckets and m.delta_ms is None:
        return [f"<p class=note>{e(t['no_buckets'])}</p>"]

    def ms(v):
        return "" if v is None else f"{v:.3f}"

    def pct(v):
        return "" if v is None else f"{v:.0f} %"

    def ci(lo, hi):
        return f"[{signed(lo)}, {signed(hi)}]" if lo is not None and hi is not None else ""

    bs = m.buckets
    floors = any(b.floor_ms is not None for b in bs)  # the CPU's scorer measures no bandwidth
    weights = any(b.weight is not None for b in bs)
    head = [t["rows"]] + ([t["weight"]] if weights else []) + [t["a_ms"], t["b_ms"]]
    head += [t["ratio"], t["d_ms"]] if m.paired else [t["d_ms_medians"]]
    head += [t["ci"], t["pct"]]
    if floors:
        head += [t["floor_ms"], t["a_floor"], t["b_floor"]]
    out = ["<table class=buckets><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in head)
           + "</tr></thead><tbody>"]
    for b in bs:
        cells = [str(b.rows)] + ([_weight(b.weight)] if weights else []) + [ms(b.a_ms), ms(b.b_ms)]
        cells += ["" if b.ratio is None else f"{b.ratio:.5f}"] if m.paired else []
        cells += ["" if b.delta_ms is None else signed(b.delta_ms), ci(b.low, b.high), _pct(b.change_pct)]
        if floors:
            cells += [ms(b.floor_ms), pct(b.pct_of_floor(b.a_ms)), pct(b.pct_of_floor(b.b_ms))]
        out.append("<tr>" + "".join(f"<td class=num>{e(c)}</td>" for c in cells) + "</tr>")
    if m.delta_ms is not None:
        total = sum(b.weight for b in bs) if weights and all(b.weight is not None for b in bs) else None
        cells = [t["score_row"]] + ([_weight(total)] if weights else []) + [ms(m.score_a), ms(m.score_b)]
        cells += [""] if m.paired else []
        cells += [signed(m.delta_ms), ci(m.low, m.high), _pct(m.delta_pct)]
        if floors:
            cells += ["", "", ""]
        out.append("<tr class=total>" + "".join(f"<td class=num>{e(c)}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    notes = []
    if not m.from_judgment:
        notes.append(t["buckets_from_ledger"].format(n=n))
    elif not m.paired:
        notes.append(t["unpaired"])
    if m.from_judgment:
        notes.append(t["floor_note"] if floors else t["no_floor"])
    out += [f"<p class=note>{e(x)}</p>" for x in notes]
    return out


def _weight(w: float | None) -> str:
    return "" if w is None else f"{w:g}"


def hidden_text(hidden, lang: str = "en") -> str:
    """A judgment's hidden inputs (``Hidden.to_dict()``) in words; a record that is not one
    (edited by hand) as it is."""
    from gates.protocol import Hidden, HiddenError

    t = TEXT[lang]
    try:
        h = Hidden.from_dict(hidden)
    except HiddenError:
        return json.dumps(hidden, sort_keys=True)
    return t["hidden_text"].format(seed=h.input_seed,
                                   rows=", ".join(map(str, h.extra_rows)) or t["none"])


def commands(a: Attempt) -> dict:
    """The commands a row names: ``kern show N``, and when the judgment's hidden inputs are
    recorded the ``kern test`` and ``kern bench`` that run its gates again on them."""
    replay = []
    if a.hidden and a.commit_sha and a.base_sha:
        rev = f"{a.commit_sha[:12]} --vs {a.base_sha[:12]} --replay-attempt {a.number}"
        replay = [f"kern test {rev}", f"kern bench {rev}"]
    return {"show": f"kern show {a.number}", "replay": replay}


def reasons(a: Attempt, judgment: dict | None, lang: str = "en") -> list:
    """Every reason the row's gates recorded, whole (the result column clips them): lines,
    and (heading, items) for lists. The judgment's file, when here, gives the accuracy gate's
    whole list (the ledger keeps its first six)."""
    t = TEXT[lang]
    g = a.gate or GateSummary()
    out: list = []
    if a.reason and a.state not in (MERGED, NOT_DONE) and a.reason not in t["reasons"]:
        out.append(t["reason_line"].format(text=a.reason))
    if g.detail:
        out.append(g.detail)
    for problem in g.scope_problems or ():
        out.append(t["scope_line"].format(text=problem))
    acc = g.accuracy
    if acc is not None and (acc.verdict or acc.reasons):
        full = nested(judgment, "test", "reasons")
        items = [str(r) for r in (full if isinstance(full, list) and len(full) > len(acc.reasons or ())
                                  else acc.reasons or ())]
        out.append((t["accuracy_line"].format(text=acc.verdict or acc.tag or ""), items))
    sc = g.scorer
    if sc is not None:
        if sc.checks:
            out.append((t["checks_line"], [f"{c.get('check')}: {c.get('why')}" if c.get("why")
                                           else str(c.get("check")) for c in sc.checks]))
        if sc.graph_matches_eager is False:
            out.append(t["scorer_line"].format(text=t["graph_differs"]))
        if sc.outcome and sc.outcome != "ok":
            out.append(t["scorer_line"].format(text=sc.outcome + (f": {sc.error}" if sc.error else "")))
        if sc.classification:
            band = f", {t['band'].format(v=f'{abs(sc.band_ms):.2f}')}" if sc.band_ms is not None else ""
            out.append(t["scorer_line"].format(text=sc.classification + band))
    if g.guard is not None and g.guard.text:
        out.append(t["guard_line"].format(text=g.guard.text))
    again = g.reverify
    if again is not None and again.outcome not in (None, "ok"):
        out.append(t["scorer_line"].format(text=f"{again.outcome}" + (f": {again.error}" if again.error else "")))
    if g.conflict:
        out.append(t["conflict_line"].format(text=g.conflict))
    return out


def _reasons_html(items: list) -> str:
    e = _html.escape
    lis = []
    for x in items:
        if isinstance(x, tuple):
            head, sub = x
            lis.append(f"<li>{e(head)}" + ("<ul>" + "".join(f"<li>{e(s)}</li>" for s in sub) + "</ul>"
                                           if sub else "") + "</li>")
        else:
            lis.append(f"<li>{e(x)}</li>")
    return "<ul class=why>" + "".join(lis) + "</ul>"


def code_spans(text: str) -> str:
    """``text`` escaped for HTML, its `backquoted` names as <code> (the estimator's)."""
    parts = _html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _detail(a: Attempt, files: AttemptFiles, lang: str, n_cols: int) -> str:
    t, e = TEXT[lang], _html.escape
    body = [f"<h3>{e(t['detail_title'].format(n=a.number))} · {e(a.title)}</h3>",
            f"<p class=meta>{e(result(a, lang, whole=True))}</p>"]
    meta = []
    if a.created_at or a.finished_at:
        meta.append(t["times"].format(created=a.created_at or "?", finished=a.finished_at or "—"))
    if a.host or a.slot:
        meta.append(t["where"].format(host=a.host or "", slot=a.slot or ""))
    if a.parts:
        meta.append(t["parts"].format(parts=" + ".join(f"#{p}" for p in a.parts)))
    if a.rerun_of is not None:
        meta.append(t["rerun_of"].format(n=a.rerun_of))
    if isinstance(a.hidden, dict) and a.hidden:
        meta.append(t["hidden"].format(text=hidden_text(a.hidden, lang)))
    if meta:
        body.append("<p class=meta>" + " · ".join(e(m) for m in meta) + "</p>")
    cmd = commands(a)
    lines = [f"<code>{e(cmd['show'])}</code> {e(t['show_cmd'])}"]
    lines += [f"<code>{e(c)}</code> {e(what)}" for c, what in zip(cmd["replay"], t["replay_cmds"])]
    if not cmd["replay"] and a.state in (MERGED, ABANDONED, CRASHED, TIMED_OUT):
        lines.append(e(t["no_replay"]))
    body.append(f"<h4>{e(t['commands'])}</h4><p class=meta>" + "<br>".join(lines) + "</p>")
    why = reasons(a, files.judgment, lang)
    if why:
        body.append(f"<h4>{e(t['why'])}</h4>" + _reasons_html(why))
    body.append(f"<h4>{e(t['per_bucket'])}</h4>")
    view = judgment_view(a, files.judgment)
    body += _bucket_table(view, a.number, lang)
    again = view.reverify
    if again is not None and again.from_judgment and again.delta_ms is not None:
        body.append(f"<h4>{e(t['remeasured_title'])}</h4>")
        body += _bucket_table(again, a.number, lang)
    elif again is not None and not again.from_judgment:  # the ledger keeps its score's change only
        body.append("<p class=meta>" + e(t["remeasured"].format(
            delta=signed(again.delta_ms), low="" if again.low is None else signed(again.low),
            high="" if again.high is None else signed(again.high))) + "</p>")
    body.append(f"<h4>{e(t['what'])}</h4>")
    if files.brief:
        body.append(f"<details class=brief><summary>{e(t['brief'])}</summary>"
                    f"<pre class=brief>{e(files.brief)}</pre></details>")
    else:
        body.append(f"<p class=note>{e(t['no_brief'].format(n=a.number))}</p>")
    if a.hypothesis and a.hypothesis.strip() and a.hypothesis.strip() != a.title.strip():
        body.append(f"<details class=hypothesis><summary>{e(t['hypothesis'])}</summary>"
                    f"<pre class=brief>{e(a.hypothesis)}</pre></details>")
    if files.diff:
        nf, add, rem = diff_stats(files.diff)
        title = t["diff"].format(base=(a.base_sha or "?")[:10], commit=(a.commit_sha or "?")[:10],
                                 files=nf, added=add, removed=rem)
        cut = len(files.diff.splitlines()) > DIFF_LINES
        body.append(f"<details class=diff><summary>{e(title)}</summary><pre class=diff>"
                    f"{_diff_html(files.diff)}</pre>"
                    + (f"<p class=note>{e(t['diff_cut'].format(n=DIFF_LINES))}</p>" if cut else "")
                    + "</details>")
    else:
        body.append(f"<p class=note>{e(t['no_diff'].format(why=diff_missing(a, files, lang)))}</p>")
    return (f'<tr class="detail" id="d-{a.number}" hidden><td colspan="{n_cols}">'
            + "\n".join(body) + "</td></tr>")


def diff_missing(a: Attempt, files: AttemptFiles, lang: str = "en") -> str:
    """Why the page shows no diff of ``a`` ('' when it has one)."""
    if files.diff:
        return ""
    t = TEXT[lang]
    return files.diff_missing or (t["no_commit"] if not a.commit_sha else
                                  t["not_in_repo"].format(sha=a.commit_sha[:10]))


def _row(a: Attempt, r, lang: str) -> str:
    t, e = TEXT[lang], _html.escape
    w = wall_s(a)
    kind = outcome_kind(a)
    cells = [
        (f'<button class="open" aria-expanded="false" aria-controls="d-{a.number}" '
         f'title="{e(t["open"].format(n=a.number))}">▸ {a.number}</button>', _num_v(a.number), "num"),
        (e(a.title), a.title, ""),
        (e(a.target or ""), a.target or "", ""),
        (e(a.backend or ""), a.backend or "", ""),
        (f"<code>{e((a.commit_sha or '')[:10])}</code>" if a.commit_sha else "", a.commit_sha or "", ""),
        (e(r.change), _num_v(a.delta_ms) if r.change else "", "num"),
        (e(r.result), r.result, ""),
        (e(fmt_wall(w, lang)), _num_v(w), "num"),
        ("" if a.tokens is None else f"{a.tokens:,}", _num_v(a.tokens), "num"),
        ("" if a.cost_usd is None else f"{a.cost_usd:.2f}", _num_v(a.cost_usd), "num"),
    ]
    tds = "".join(f'<td{" class=num" if cls else ""} data-v="{e(v, quote=True)}">{h}</td>'
                  for h, v, cls in cells)
    return (f'<tr class="row {e(a.state.replace(" ", "-"))}" id="a-{a.number}" data-n="{a.number}" '
            f'data-kind="{e(kind)}" data-detail="d-{a.number}">{tds}</tr>')


def html(attempts: Iterable[Attempt], phases=(), scores: Sequence[Score] = (), lang: str = "en",
         title: str | None = None, files: Mapping[int, AttemptFiles] | None = None) -> str:
    """The page (see the module docstring). ``files``: per attempt number what the shell found
    on disk and in git; missing entries show what is missing. Same records, same bytes."""
    check_lang(lang)
    t, e = TEXT[lang], _html.escape
    attempts = list(attempts)
    files = files or {}
    by_number = {a.number: a for a in shown(attempts)}
    head = title or t["title"]
    body = [f"<h1>{e(head)}</h1>"]
    secs = sections(attempts, phases, scores, lang)
    if secs:
        body.append(f"<p class=estimator>{code_spans(t['estimator'])}</p>")
    panels = {p.phase_id: p for p in plot_panels(attempts, phases, scores, lang)}
    if not secs and not panels:
        body += [f"<p>{e(t['empty'])}</p>", f"<p class=note>{e(t['no_scores'])}</p>"]
    kinds_present = [k for k in KINDS if any(outcome_kind(a) == k[0] for a in by_number.values())]
    if by_number:
        opts = [f'<option value="">{e(t["filter_all"])}</option>'] + [
            f'<option value="{e(k[0])}">{e(t["kinds"][k[0]])}</option>' for k in kinds_present]
        body.append(f'<div class="controls"><label>{e(t["filter"])} <select id="filter">'
                    + "".join(opts) + f'</select></label><span class="hint">{e(t["sort_hint"])}</span></div>')
    pm = phase_map(phases)
    sec_ids = [s.phase_id for s in secs]
    for pid in sorted(set(sec_ids) | set(panels), key=lambda p: (p is None, p or 0)):
        sec = next((s for s in secs if s.phase_id == pid), None)
        if sec is not None:
            heading = sec.heading
        else:
            heading = t["unknown_phase"] if pid is None else f"{t['phase']} {pid}" + (
                f" · {describe(pm[pid].definition)}" if pid in pm else "")
        body += [f'<section class="phase" data-phase="{"" if pid is None else pid}">',
                 f"<h2>{e(heading)}</h2>", f"<p class=note>{e(t['note'])}</p>"]
        if sec is not None:
            body.append(f"<p class=summary>{e(summary(sec, lang))}</p>")
        pan = panels.get(pid)
        if pan is not None:
            tips = {r.number: f"#{r.number} {r.title} — {r.result}" for r in (sec.rows if sec else [])}
            body.append(svg(pan, tips, lang))
            seen = {p.kind for p in pan.points}
            items = ([("main", t["main_line"])] if pan.main else []) + [
                (k[0], t["kinds"][k[0]]) for k in KINDS if k[0] in seen]
            if any(p.low is not None for p in pan.points):
                items.append(("interval", t["interval"]))
            body.append("<ul class=legend>" + "".join(f"<li>{legend_swatch(k)}{e(lab)}</li>" for k, lab in items)
                        + "</ul>")
        if sec is not None and sec.rows:
            body.append('<table class="journey"><thead><tr>' + "".join(
                f'<th data-type="{"num" if c in NUMERIC else "text"}"><button>{e(t["page_cols"][c])}</button></th>'
                for c in COLUMNS) + "</tr></thead><tbody>")
            for r in sec.rows:
                a = by_number[r.number]
                body.append(_row(a, r, lang))
                body.append(_detail(a, files.get(a.number) or AttemptFiles(), lang, len(COLUMNS)))
            body.append("</tbody></table>")
        if sec is not None and sec.not_shown:
            body.append(f"<p class=note>{e(not_shown_line(sec, lang))}</p>")
        body.append("</section>")
    return ("<!DOCTYPE html>\n"
            f'<html lang="{lang}"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{e(head)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(body) + f"\n<script>{_JS}</script>\n</body></html>\n")
