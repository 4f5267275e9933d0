"""The journey's rows: which attempts are rows, what each row's columns say, phases and summaries.

Pure functions of ledger records (:class:`~harness.ledger.Attempt`, phases, scores); nothing
here reads the ledger, the clock or the disk, so the same records always give the same bytes
(the golden test relies on it).

**An attempt that tried nothing is not a row** (:func:`tried_nothing`): an agent that declined
with no estimated gain (the tuner's "nothing left to tune", a replay with no patch left) made no
commit and analysed no idea worth telling. The ledger keeps it (the planner reads it: the
target is exhausted); the journey leaves it out and says how many it left out, with their
numbers, under the phase's table.

**The estimator** (said once on every rendering, :data:`.text.TEXT` ``estimator``): a score
change B − A is the scorer's paired estimate (gates/rules/stats.py ``paired_delta``): per bucket A's
median × (m − 1), m the median over replay pairs of B's time over A's, the score's B − A the
buckets' weighted as the score weights them. It is not B's median − A's median. A large gain is
measured again before it merges; the row's score change (:func:`headline_ms`), and so a phase's
gain, is the re-measured one where there is one.

Where a result's numbers come from (the orchestrator writes them; ``gate`` is the row's
:class:`~gates.summary.GateSummary`); the result column says what decided each attempt:

    merged (−0.35 [−0.41, −0.29])
                               state merged: ``delta_ms`` (B − A, ms) and its interval
                               (``ci_low``, ``ci_high``)
    merged (re-measured −0.33 [−0.40, −0.27]; first −0.35 [−0.41, −0.29])
                               the same, re-measured (``gate.reverify``)
    abandoned: within noise (−417.69 [−900.10, +60.30], band ±120.00)
    abandoned: slower (+0.21 [+0.15, +0.27])
                               reason "within noise" / "slower": the same, and the noise band
                               the interval was held to (``gate.scorer.band_ms``) when
                               recorded
    abandoned: accuracy (FAIL: KL(A||B) max 0.031 > limit 0.01)
                               reason "accuracy": ``gate.accuracy.verdict`` and its first
                               reason (``.reasons[0]``, cut at 100 characters), ``+N more``
                               when it has more; ``.tag`` when no reason is recorded
    abandoned: guard (+2.4 % at 16 rows)
                               reason "guard": ``gate.guard.worst_pct`` and ``.rows``
    abandoned: scorer check (timed_outputs_identical: …)
                               reason "scorer check": the first failed check of
                               ``gate.scorer.checks`` (its name and ``why``), or the
                               scorer's outcome (``gate.scorer.outcome``)
    abandoned: <reason>        any other reason; ``gate.detail`` (a short string), when
                               present, overrides the parenthesis for every reason
    crashed (illegal memory access at 256 rows) · timed out (scorer timeout) ·
    interrupted (SIGINT (Ctrl-C) to kern try while judging; …)
                               the recorded reason, then the last line of the side that
                               ended (``gate.last_words``: ``B replay: <its line>``) when
                               the row kept it
    not done: estimated −0.4   ``estimate_ms``
    waiting on #31             ``waiting_on``
    running · queued · judging

Measured numbers in the result column print with a typographic minus, as prose; the score
change column keeps ASCII signs (CSV readers parse it as a number). With ``lang="zh"`` the
journey's own words are translated (:mod:`.text`); recorded text stays as recorded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from gates.results import ScorerView
from gates.summary import AccuracySummary, GateSummary, GuardSummary, ReverifySummary, ScorerSummary

from ..ledger import (ABANDONED, ACCURACY, CRASHED, GUARD, IN_FLIGHT, INTERRUPTED, MERGED, NOT_DONE,
                      SLOWER,
                      TIMED_OUT, WAITING, WITHIN_NOISE, Attempt, Phase, mains)
from .text import TEXT, check_lang

SCORER_CHECK = "scorer check"  # gates.rules.decision.decide's reason when a scorer check failed

MINUS = "\u2212"  # estimates print with a typographic minus, as in the published journey


@dataclass(frozen=True)
class JourneyRow:
    number: int
    title: str
    change: str  # the score change column: B − A in ms, signed; "" when nothing was measured
    result: str
    state: str
    phase_id: int | None
    delta_ms: float | None  # the change column's number (:func:`headline_ms`), unrounded


def tried_nothing(a: Attempt) -> bool:
    """The loop's rule for rows: an attempt declined with no estimated gain (``not done`` with
    an estimate of 0 or none) tried nothing, and is no row of the journey. The planner reads
    the same records as "this target is exhausted" (harness/planning.py)."""
    return a.state == NOT_DONE and not a.estimate_ms


def shown(attempts: Iterable[Attempt]) -> list[Attempt]:
    """The attempts that are journey rows, in number order."""
    return [a for a in sorted(attempts, key=lambda a: a.number) if not tried_nothing(a)]


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


# Short tags for the accuracy gate's reason sentences (gates/rules/verdict.judge), first match wins.
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


def signed(ms: float) -> str:
    """A measured change as prose: signed, typographic minus."""
    return fmt_delta(ms).replace("-", MINUS)


def measured(a: Attempt, band_ms=None, lang: str = "en") -> str:
    """``−0.35 [−0.41, −0.29]``: the change and its interval ('' when nothing was measured),
    then the noise band it was held to when known."""
    if a.delta_ms is None:
        return ""
    text = signed(a.delta_ms)
    if a.ci_low is not None and a.ci_high is not None:
        text += f" [{signed(a.ci_low)}, {signed(a.ci_high)}]"
    if isinstance(band_ms, (int, float)) and not isinstance(band_ms, bool):
        text += ", " + TEXT[lang]["band"].format(v=f"{abs(band_ms):.2f}")
    return text


def clip(text: str, limit: int | None = 100) -> str:
    """``text`` on one line, at most ``limit`` characters (None: all of it): cut at a word when
    one ends late enough, the cut marked with an ellipsis."""
    text = " ".join(str(text).split())
    if limit is None or len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    if space >= limit * 0.6:
        cut = cut[:space]
    return cut.rstrip(" ,;:(") + "…"


def _more(n: int, lang: str) -> str:
    return f" ({TEXT[lang]['more'].format(n=n)})" if n > 0 else ""


def remeasured(a: Attempt) -> ReverifySummary | None:
    """The re-measurement of ``a``'s gain when it measured a change (None otherwise)."""
    again = a.gate.reverify if a.gate is not None else None
    if again is None or again.outcome not in (None, "ok") or not _is_number(again.delta_ms):
        return None
    return again


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def ledger_view(a: Attempt) -> ScorerView:
    """``a``'s A/B as its ledger row keeps it (the per-bucket medians, the score's B − A with
    its interval, the re-measurement's), in the one form every reader shows an A/B."""
    again = a.gate.reverify if a.gate is not None else None
    return ScorerView.of_ledger(a.delta_ms, a.ci_low, a.ci_high, a.delta_pct, a.medians_a,
                                a.medians_b, reverify=None if again is None else again.view())


def judgment_view(a: Attempt, judgment: dict | None = None) -> ScorerView:
    """``a``'s A/B: from its judgment's file (``runs/attempts/<n>/judgment-<k>.json``, its
    ``bench``) where that measured one, else from its ledger row; its re-measurement likewise.
    ``kern show``, the page and the JSON export all read this one view."""
    bench = judgment.get("bench") if isinstance(judgment, dict) else None
    report = ScorerView.of(bench)
    return ledger_view(a) if report is None else report.or_ledger(ledger_view(a))


def headline_ms(a: Attempt) -> float | None:
    """The score change a row counts (its change column, a phase's gain): the re-measured
    B − A where the gain was measured again, else the judgment's; None unless judged."""
    if a.state not in (MERGED, ABANDONED):
        return None
    return ledger_view(a).counted.delta_ms


def interval_text(delta: float, ci) -> str:
    """``−0.35 [−0.41, −0.29]`` (the interval left out when not both ends are numbers)."""
    text = signed(delta)
    lo, hi = (tuple(ci) + (None, None))[:2] if ci else (None, None)
    if _is_number(lo) and _is_number(hi):
        text += f" [{signed(lo)}, {signed(hi)}]"
    return text


def _detail(a: Attempt, lang: str, whole: bool = False) -> str:
    limit = None if whole else 100
    t = TEXT[lang]
    gate = a.gate or GateSummary()
    if gate.detail:
        return gate.detail
    if a.state == MERGED:
        again = remeasured(a)
        if again is not None and a.delta_ms is not None:
            return t["result_remeasured"].format(again=interval_text(again.delta_ms, again.ci),
                                                 first=measured(a, lang=lang))
        return measured(a, lang=lang)
    if a.state in (CRASHED, TIMED_OUT, INTERRUPTED):
        words = gate.last_words  # the side's last line, when the row kept it
        said = f"{words.side}: {clip(words.last, 80 if limit else None)}" if words is not None and words.last else ""
        return " · ".join(x for x in (clip(a.reason, limit) if a.reason else "", said) if x)
    if a.reason in (SLOWER, WITHIN_NOISE):
        return measured(a, (gate.scorer or ScorerSummary()).band_ms, lang)
    if a.reason == ACCURACY:
        acc = gate.accuracy or AccuracySummary()
        verdict = acc.verdict or ""
        reasons = [r for r in acc.reasons or () if r.strip()]
        if reasons:
            if whole:  # every reason, as recorded
                return (f"{verdict}: " if verdict else "") + "; ".join(clip(r, None) for r in reasons)
            return (f"{verdict}: " if verdict else "") + clip(reasons[0]) + _more(len(reasons) - 1, lang)
        tag = acc.tag or ""
        if tag in verdict.split():  # the verdict already names it
            tag = ""
        return " ".join(x for x in (verdict, tag) if x)
    if a.reason == GUARD:
        g = gate.guard or GuardSummary()
        pct, rows = g.worst_pct, g.rows
        if pct is None:
            return ""
        return f"{pct:+.1f} %".replace("-", MINUS) + (
            " " + t["at_rows"].format(rows=rows) if rows is not None else "")
    if a.reason == SCORER_CHECK:
        b = gate.scorer or ScorerSummary()
        checks = b.checks or ()
        if checks:
            texts = [f"{c.get('check') or 'check'}: {c.get('why')}" if c.get("why")
                     else str(c.get("check") or "check") for c in checks]
            if whole:
                return "; ".join(clip(x, None) for x in texts)
            return clip(texts[0]) + _more(len(checks) - 1, lang)
        if b.graph_matches_eager is False:
            return t["graph_differs"]
        if b.outcome:
            return clip(f"{b.outcome}" + (f": {b.error}" if b.error else ""), limit)
    return ""


def state_word(state: str, lang: str = "en") -> str:
    return TEXT[lang]["states"].get(state, state)


def reason_word(reason: str | None, lang: str = "en") -> str:
    if not reason:
        return TEXT[lang]["no_reason"]
    return TEXT[lang]["reasons"].get(reason, reason)


def result(a: Attempt, lang: str = "en", whole: bool = False) -> str:
    """The result column for one attempt (see the module docstring for every form); ``whole``:
    nothing clipped or counted as "+N more" (the opened row)."""
    t = TEXT[lang]
    if a.state == ABANDONED:
        d = _detail(a, lang, whole)
        return state_word(a.state, lang) + t["sep"] + reason_word(a.reason, lang) + (f" ({d})" if d else "")
    if a.state == NOT_DONE:
        return state_word(a.state, lang) + (
            t["sep"] + t["estimated"].format(v=fmt_estimate(a.estimate_ms))
            if a.estimate_ms is not None else "")
    if a.state == WAITING:
        return t["waiting_on"].format(n=a.waiting_on) if a.waiting_on is not None else state_word(a.state, lang)
    if a.state in (MERGED, CRASHED, TIMED_OUT, INTERRUPTED):
        d = _detail(a, lang, whole)
        return state_word(a.state, lang) + (f" ({d})" if d else "")
    if a.state in (*IN_FLIGHT, WAITING):
        return state_word(a.state, lang)  # running, queued, judging
    # a state that ends an attempt otherwise (interrupted, cancelled): why, as recorded
    return state_word(a.state, lang) + (f" ({clip(a.reason, None if whole else 100)})" if a.reason else "")


def change(a: Attempt) -> str:
    # Only judged attempts have a measured change; an estimate is not a measurement.
    ms = headline_ms(a)
    return "" if ms is None else fmt_delta(ms)


def rows(attempts: Iterable[Attempt], lang: str = "en") -> list[JourneyRow]:
    """The journey's rows (attempts that tried nothing left out), in number order."""
    return [JourneyRow(a.number, a.title, change(a), result(a, lang), a.state, a.phase_id,
                       headline_ms(a)) for a in shown(attempts)]


# --------------------------------------------------------------------------- grouping
def phase_map(phases) -> dict[int, Phase]:
    """Phases as given: Phase records, or a mapping id -> definition."""
    if isinstance(phases, Mapping):
        return {int(k): (v if isinstance(v, Phase) else Phase(int(k), dict(v), "", ""))
                for k, v in phases.items()}
    return {p.id: p for p in phases or ()}


def describe(definition: dict) -> str:
    """A phase's definition on one line: ``buckets 16,32 · context 4096 · …``."""
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
class Section:
    """One phase of the journey: its heading, rows, summary numbers, and the attempts left out."""
    phase_id: int | None
    heading: str
    rows: list
    merged: int
    gain_ms: float
    first_score: float | None
    last_score: float | None
    not_shown: tuple = ()  # numbers of the phase's attempts that tried nothing


def sections(attempts, phases, scores, lang: str) -> list[Section]:
    t = TEXT[lang]
    pm = phase_map(phases)
    attempts = list(attempts)
    by_phase: dict = {}
    for r in rows(attempts, lang):
        by_phase.setdefault(r.phase_id, []).append(r)
    hidden: dict = {}
    for a in sorted(attempts, key=lambda a: a.number):
        if tried_nothing(a):
            hidden.setdefault(a.phase_id, []).append(a.number)
            by_phase.setdefault(a.phase_id, [])
    out = []
    for pid in sorted(by_phase, key=lambda p: (p is None, p or 0)):
        rs = by_phase[pid]
        if pid is None:
            heading = t["unknown_phase"]
        elif pid in pm:
            desc = describe(pm[pid].definition)
            heading = f"{t['phase']} {pid}" + (f" · {desc}" if desc else "")
        else:
            heading = f"{t['phase']} {pid}"
        merged = [r for r in rs if r.state == MERGED]
        # the printed changes summed, so the gain is the sum of the figures above it
        gain = -sum(float(r.change) for r in merged if r.change)
        ss = mains(s for s in scores or () if s.phase_id == pid)
        out.append(Section(pid, heading, rs, len(merged), gain,
                           ss[0].score_ms if ss else None, ss[-1].score_ms if ss else None,
                           tuple(hidden.get(pid, ()))))
    return out


def summary(sec: Section, lang: str) -> str:
    """A phase's summary line: merges of rows, the gain (the merged rows' score changes
    summed, as the change column prints them) and main's first and last score with their
    difference; each number recomputable from the rows and the plot beside it."""
    t = TEXT[lang]
    s = t["summary"].format(merged=sec.merged, total=len(sec.rows), gain=fmt_gain(sec.gain_ms))
    if sec.first_score is not None:
        first, last = round(sec.first_score, 3), round(sec.last_score, 3)
        s += " · " + t["main"].format(first=f"{first:.3f}", last=f"{last:.3f}",
                                      change=f"{last - first:+.3f}".replace("-", MINUS))
    return s


def not_shown_line(sec: Section, lang: str) -> str:
    """The line under a phase's table naming the attempts that tried nothing ('' if none)."""
    if not sec.not_shown:
        return ""
    return TEXT[lang]["not_shown"].format(n=len(sec.not_shown),
                                          numbers=", ".join(f"#{n}" for n in sec.not_shown))


__all__ = ["JourneyRow", "MINUS", "SCORER_CHECK", "Section", "accuracy_tag", "change", "check_lang",
           "clip", "describe", "fmt_delta", "fmt_estimate", "fmt_gain", "headline_ms",
           "interval_text", "judgment_view", "ledger_view", "measured", "not_shown_line",
           "phase_map", "reason_word", "remeasured", "result", "rows", "sections", "shown",
           "signed", "state_word", "summary", "tried_nothing"]
