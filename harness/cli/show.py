"""``kern show N``: one attempt whole, from what the ledger and ``runs/attempts/<n>/`` hold.

What it was (title, backend, target, phase, tick), when (its events), the brief it was given
(``brief.md``), the commit (``git diff --stat`` base..commit; the diff with ``--diff``), the
agent's transcript (turns, tool calls, tokens, cost: :func:`transcript_summary` reads each
backend's format), every gate's result of its deciding judgment (``judgment-<k>.json``: the
accuracy verdict with its reasons, the scorer per bucket: both sides' medians, the change with
its interval, % of the roofline floor, failed checks; the re-measurement), the last words of
a side that ended badly (its log's last lines and path), its hidden inputs and how it ended.
The files are read here, the view is built by the pure :func:`attempt_view` and printed by the
pure :func:`show_lines`; ``--json`` prints the view itself. Reading never creates a ledger.
"""
from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from ..gitcmd import git_or_none
from ..ledger import Ledger, LedgerError
from ..progress import fmt_duration
from .shared import MAX_ATTEMPT, whole

def register(sub) -> None:
    from .shared import examples

    p = sub.add_parser(
        "show", **examples(
            "kern show 12                          the attempt, its brief, its agent's tool calls, its gates",
            "kern show 12 --diff                   ... and the commit's whole diff against its base",
            "kern show 12 --json | jq .bench.buckets  the scorer per bucket as JSON"),
        help="one attempt whole: brief, commit, transcript, every gate per bucket, hidden inputs",
        description="One attempt of the ledger whole: title, backend, target and times; the brief "
                    "its agent was given; the commit (stat; --diff: the diff); the agent's transcript "
                    "(turns, tool calls, tokens, cost); the accuracy gate's verdict and the scorer per "
                    "bucket (medians, change with its interval, % of the roofline floor, failed "
                    "checks) of the judgment that decided it; its hidden inputs. Reads the ledger "
                    "and runs/attempts/N/ only.")
    p.add_argument("number", type=whole(1, MAX_ATTEMPT, "an attempt number"), metavar="N", help="the attempt's number (kern status and "
                                                          "kern report list them)")
    p.add_argument("--diff", action="store_true", help="also print the commit's diff against its base")
    p.add_argument("--json", action="store_true", help="print the whole view as one JSON object")
    p.set_defaults(func=cmd_show)


# ----------------------------------------------------------------------------- transcripts
def _tool_line(name: str, args) -> str:
    """One tool call in a few words: its name and the argument that says what it touched."""
    args = args if isinstance(args, dict) else {}
    for k in ("file_path", "path", "notebook_path", "command", "glob", "pattern", "kind", "url"):
        if isinstance(args.get(k), str) and args[k].strip():
            what = " ".join(args[k].split())
            if len(what) <= 110:
                return f"{name} {what}"
            # a path keeps its end (the file), anything else its start
            return f"{name} …{what[-109:]}" if k.endswith("path") else f"{name} {what[:109]}…"
    return name


def transcript_summary(lines: list[str]) -> dict:
    """Pure: turns, tool calls (one line each, in order; ``error`` when the tool refused) and
    the transcript's own tally of tokens and cost, from the lines of any backend's transcript:
    the anthropic backend's events, the claude-code backend's SDK messages, the Claude Code
    CLI's ``--output-format stream-json`` or ``json`` output; other text: its line count."""
    rows = []
    for ln in lines:
        ln = ln.strip()
        if ln.startswith("{"):
            try:
                rows.append(json.loads(ln))
            except ValueError:
                pass
    rows = [r for r in rows if isinstance(r, dict)]
    out = {"format": "text", "turns": None, "tool_calls": [], "tokens_in": None, "tokens_out": None,
           "cost_usd": None, "lines": len(lines)}
    if any("event" in r for r in rows):  # the anthropic backend
        out["format"] = "anthropic"
        out["turns"] = sum(1 for r in rows if r.get("event") == "response")
        out["tool_calls"] = [{"call": _tool_line(r.get("name", "?"), r.get("input")),
                              "error": bool(r.get("is_error"))} for r in rows if r.get("event") == "tool"]
        end = next((r.get("proposal") for r in reversed(rows) if r.get("event") == "end"), None) or {}
        out.update(tokens_in=end.get("tokens_in"), tokens_out=end.get("tokens_out"),
                   cost_usd=end.get("cost_usd"))
        return out
    sdk = any(r.get("type") in ("AssistantMessage", "ResultMessage") for r in rows)
    cli = any(r.get("type") in ("assistant", "result") for r in rows)
    if not (sdk or cli):
        return out
    out["format"] = "claude-code" if sdk else "claude -p"
    errors = set()
    calls = []
    for r in rows:
        if r.get("type") in ("AssistantMessage", "assistant"):
            content = r.get("content") if sdk else (r.get("message") or {}).get("content")
            for b in content or []:
                if isinstance(b, dict) and "name" in b and "input" in b:
                    calls.append((b.get("id"), _tool_line(b["name"], b["input"])))
        if r.get("type") in ("UserMessage", "user"):
            content = r.get("content") if sdk else (r.get("message") or {}).get("content")
            for b in content if isinstance(content, list) else []:
                if isinstance(b, dict) and b.get("is_error") and b.get("tool_use_id"):
                    errors.add(b["tool_use_id"])
    out["tool_calls"] = [{"call": c, "error": i in errors} for i, c in calls]
    result = next((r for r in reversed(rows) if r.get("type") in ("ResultMessage", "result")), None)
    if result is not None:
        from ..agents.common import cli_tokens

        out["turns"] = result.get("num_turns")
        out["tokens_in"], out["tokens_out"] = cli_tokens(result.get("model_usage") or result.get("modelUsage"),
                                                         result.get("usage"))
        out["cost_usd"] = result.get("total_cost_usd")
    return out


# ----------------------------------------------------------------------------- the view
def _since(start: str | None, end: str | None) -> float | None:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return None


def _scorer(report: dict | None) -> dict | None:
    """Pure: the scorer's report per bucket (A and B medians, B - A with its interval, B's %
    of the roofline floor, failed checks), its score and how it classed the change."""
    if not report:
        return None
    out = {"outcome": report.get("outcome"), "error": report.get("error"), "buckets": [],
           "wall_s": report.get("wall_s")}
    an = report.get("analysis") or {}
    sides = an.get("sides") or {}
    if report.get("outcome") != "ok" or not sides:
        return out
    ab = an.get("ab") or {}
    per = (ab.get("delta") or {}).get("buckets") or {}
    cost, bw = report.get("cost") or {}, (report.get("bandwidth") or {}).get("Bps")
    for b in report.get("buckets") or []:
        key = str(b)
        row = {"rows": int(b)}
        for k in sorted(sides):
            s = (sides[k].get("buckets") or {}).get(key) or {}
            row[f"{k.lower()}_ms"] = s.get("median")
            row[f"{k.lower()}_p10_p90"] = [s.get("p10"), s.get("p90")] if s else None
        d = per.get(key)
        if d:
            row.update(change_ms=d["delta"], interval=[d["low"], d["high"]])
        c = cost.get(key) or {}
        side = "B" if "B" in sides else sorted(sides)[0]
        median = ((sides[side].get("buckets") or {}).get(key) or {}).get("median")
        if c.get("bytes") and bw and median:
            floor = c["bytes"] / bw * 1e3
            row.update(floor_ms=floor, pct_of_floor=floor / median * 100)
        out["buckets"].append(row)
    out["sides"] = {k: {"score_ms": s.get("score"),
                        "failed_checks": [c.get("check", c) if isinstance(c, dict) else c
                                          for c in s.get("failed_checks") or []],
                        "graph_matches_eager": s.get("graph_matches_eager")} for k, s in sides.items()}
    if ab:
        d = ab.get("delta") or {}
        out.update(change_ms=d.get("delta"), interval=[d.get("low"), d.get("high")],
                   change_pct=ab.get("delta_pct"), band_ms=ab.get("band"),
                   classification=ab.get("classification"), guard=ab.get("guard"))
    if report.get("reverify"):
        out["reverify"] = _scorer(report["reverify"])
    return out


def _phases(judgment: dict | None) -> dict | None:
    """Pure: where the judgment's time went (gates/phases.py): each gate's seconds, the whole
    judgment's, and per gate each part's phases; ``recorded`` False for a judgment kept before
    its phases were (then what its reports show)."""
    from gates.phases import GATES, JudgmentTimes

    if not judgment or not (judgment.get("test") or judgment.get("bench")):
        return None
    t = JudgmentTimes.of_judgment(judgment)
    return {"accuracy_s": t.accuracy_s, "scorer_s": t.scorer_s, "remeasure_s": t.remeasure_s,
            "total_s": t.total_s, "recorded": judgment.get("times") is not None,
            "gates": {g: t.by_part(g) for g in GATES if t.by_part(g)}}


def _accuracy(report: dict | None) -> dict | None:
    if not report:
        return None
    ev = report.get("evidence") or {}
    return {"verdict": report.get("verdict"), "reasons": list(report.get("reasons") or []),
            "rows": report.get("rows"), "wall_s": report.get("wall_s"),
            "sides": {k: ev.get(f"outcome_{k}") for k in ("a", "b", "noise") if ev.get(f"outcome_{k}")}}


def _last_words(gate, judgment: dict) -> list[dict]:
    """Pure: every side of the deciding judgment that ended badly, in its own words (the
    judgment file's reports), else what the ledger row kept (``gate.last_words``)."""
    from gates.results import AccuracyResult, BenchResult

    words = []
    try:
        if judgment.get("test"):
            words += AccuracyResult.of(judgment["test"]).last_words
        if judgment.get("bench"):
            b = BenchResult.of(judgment["bench"])
            words += [w for w in (b.last_words, b.reverify.last_words if b.reverify else None) if w]
    except (KeyError, TypeError, ValueError, AttributeError):  # a report edited or cut short
        words = []
    if not words and gate is not None and gate.last_words is not None:
        words = [gate.last_words]
    return [w.to_dict() for w in words]


def attempt_view(attempt, events: list, files: dict) -> dict:
    """Pure: everything ``kern show`` says of one attempt. ``attempt``: its ledger row;
    ``events``: its ledger events; ``files``: what was read beside it: ``brief`` (text or None),
    ``proposal`` (dict or None), ``transcript`` ({"path", "lines"} or None), ``judgments``
    (the judgment files' JSON, in order), ``stat``/``diff`` (git's text or None), ``dir``."""
    a = attempt
    gate = {} if a.gate is None else a.gate.to_dict()  # the view is JSON (kern show --json)
    judgments = files.get("judgments") or []
    last = judgments[-1] if judgments else {}
    proposal = files.get("proposal") or {}
    tr = files.get("transcript")
    summary = transcript_summary(tr["lines"]) if tr and tr.get("lines") is not None else None
    agent = None
    if proposal or summary or a.tokens or a.cost_usd:
        agent = {"proposal": proposal.get("kind"), "message": proposal.get("message") or None,
                 "reason": proposal.get("reason") or None,
                 "tokens_in": proposal.get("tokens_in", (summary or {}).get("tokens_in")),
                 "tokens_out": proposal.get("tokens_out", (summary or {}).get("tokens_out")),
                 "tokens": a.tokens, "cost_usd": a.cost_usd if a.cost_usd is not None
                 else proposal.get("cost_usd"),
                 "transcript": None if tr is None else tr.get("path"),
                 "transcript_found": bool(tr and tr.get("lines") is not None),
                 **({} if summary is None else {"format": summary["format"], "turns": summary["turns"],
                                                "tool_calls": summary["tool_calls"]})}
    times = [{"at": e.at, "kind": e.kind, "from": (e.data or {}).get("from"), "to": (e.data or {}).get("to"),
              "reason": (e.data or {}).get("reason")} for e in events if e.kind in ("created", "transition")]
    return {
        "number": a.number, "title": a.title, "state": a.state, "reason": a.reason,
        "decision": a.decision, "backend": a.backend, "target": a.target or None,
        "phase": a.phase_id, "tick": a.tick_id, "hypothesis": a.hypothesis or None,
        "base_sha": a.base_sha, "commit_sha": a.commit_sha, "merged_sha": a.merged_sha,
        "parts": a.parts, "rerun_of": a.rerun_of, "estimate_ms": a.estimate_ms,
        "created_at": a.created_at, "finished_at": a.finished_at,
        "took_s": _since(a.created_at, a.finished_at or a.updated_at),
        "times": times, "host": a.host, "slot": a.slot, "files": files.get("dir"),
        "brief": files.get("brief"), "stat": files.get("stat"), "diff": files.get("diff"),
        "agent": agent,
        "judgments": len(judgments),
        "scope": gate.get("scope"), "conflict": gate.get("conflict"),
        "accuracy": _accuracy(last.get("test")) or gate.get("accuracy"),
        "bench": _scorer(last.get("bench")),
        "last_words": _last_words(a.gate, last),
        "phases": _phases(last),
        "ledger": {"delta_ms": a.delta_ms, "interval": [a.ci_low, a.ci_high], "delta_pct": a.delta_pct,
                   "medians_a": a.medians_a, "medians_b": a.medians_b,
                   "gate": None if a.gate is None else gate},
        "hidden": a.hidden,
    }


# ----------------------------------------------------------------------------- the lines
def _ms(x, sign: bool = False) -> str:
    return "-" if x is None else (f"{x:+.3f}" if sign else f"{x:.3f}")


def _dur(s: float | None) -> str:
    return "?" if s is None else fmt_duration(round(s), ("s", "min", "h"), " ")


def _indent(text: str, pad: str = "           ") -> list[str]:
    return [pad + ln if ln else "" for ln in text.rstrip("\n").splitlines()]


def _scorer_lines(b: dict, head: str) -> list[str]:
    out = []
    if b.get("outcome") != "ok":
        return [f"{head:<10} {b.get('outcome')}: {b.get('error') or 'no measurement'}"]
    both = any("a_ms" in r for r in b["buckets"])
    cols = f"{'rows':>5} " + (f"{'A ms':>9} " if both else "") + f"{'B ms':>9}"
    if both:
        cols += f" {'B - A ms':>9}  {'interval':<20}"
    cols += f" {'% floor':>8}"
    out.append(f"{head:<10} {cols}")
    for r in b["buckets"]:
        line = f"{r['rows']:>5} " + (f"{_ms(r.get('a_ms')):>9} " if both else "") + f"{_ms(r.get('b_ms')):>9}"
        if both:
            iv = r.get("interval")
            line += f" {_ms(r.get('change_ms'), True):>9}  " + \
                (f"[{iv[0]:+.3f}, {iv[1]:+.3f}]" if iv else "-").ljust(20)
        pct = r.get("pct_of_floor")
        line += f" {(f'{pct:.0f} %' if pct is not None else '-'):>8}"
        out.append(f"{'':<10} {line}")
    if b.get("change_ms") is not None:
        sides = b.get("sides") or {}
        iv = b.get("interval") or [None, None]
        out.append(f"{'':<10} score {_ms((sides.get('A') or {}).get('score_ms'))} → "
                   f"{_ms((sides.get('B') or {}).get('score_ms'))} ms: {b['change_ms']:+.3f} ms "
                   f"({b['change_pct']:+.1f} %) [{iv[0]:+.3f}, {iv[1]:+.3f}], "
                   f"{b.get('classification')} (noise band ±{b.get('band_ms') or 0:.3f} ms); {b.get('guard')}")
    for k, s in sorted((b.get("sides") or {}).items()):
        failed = list(s.get("failed_checks") or [])
        if s.get("graph_matches_eager") is False:
            failed.append("graph replay differs from the eager step")
        out.append(f"{'':<10} checks {k}: {', '.join(map(str, failed)) if failed else 'all passed'}")
    return out


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s" if x < 10 else f"{x:.0f} s"


GATE_NAMES = {"accuracy": "accuracy", "scorer": "scorer", "remeasure": "re-measure"}


def _phase_lines(ph: dict | None) -> list[str]:
    """Pure: the judgment's phases, one line per gate's total and one per part."""
    if not ph:
        return []
    walls = [(GATE_NAMES[g], ph.get(f"{k}_s")) for g, k in
             (("accuracy", "accuracy"), ("scorer", "scorer"), ("remeasure", "remeasure"))]
    head = " · ".join(f"{name} {_secs(s)}" for name, s in walls if s is not None)
    head += f" · total {_secs(ph['total_s'])}" if ph.get("total_s") is not None else ""
    out = [f"{'phases':<10} {head or 'none measured'}"
           + ("" if ph.get("recorded") else " (kept before phases were recorded: each side's wall)")]
    for gate, parts in (ph.get("gates") or {}).items():
        for i, (part, phases) in enumerate(parts.items()):
            label = GATE_NAMES.get(gate, gate) if i == 0 else ""
            out.append(f"{'':<10} {label:<10} {part:<12} "
                       + " · ".join(f"{k} {_secs(v)}" for k, v in phases.items()))
    return out


def show_lines(v: dict) -> list[str]:
    """Pure: the view as the lines ``kern show`` prints, one section a block."""
    out = [f"{'attempt':<10} #{v['number']} {v['state']}"
           + (f" ({v['reason']})" if v.get("reason") else "") + f": {v['title']}"]
    facts = [f"backend {v['backend'] or '-'}", f"target {v['target'] or '-'}",
             f"phase {v['phase'] if v['phase'] is not None else '-'}"]
    if v.get("tick") is not None:
        facts.append(f"tick {v['tick']}")
    if v.get("host"):
        facts.append(f"judged on {v['host']} {v['slot'] or ''}".rstrip())
    if v.get("parts"):
        facts.append(f"trial merge of {', '.join('#' + str(p) for p in v['parts'])}")
    if v.get("rerun_of"):
        facts.append(f"re-run of #{v['rerun_of']}")
    out.append(f"{'':<10} " + " · ".join(facts))
    out.append(f"{'times':<10} created {v['created_at']}"
               + (f", final {v['finished_at']} ({_dur(v['took_s'])})" if v.get("finished_at") else
                  f", not final yet ({_dur(v['took_s'])} so far)"))
    for t in v["times"]:
        if t["kind"] == "transition":
            out.append(f"{'':<10} {t['at']}  {t['from']} → {t['to']}"
                       + (f": {t['reason']}" if t.get("reason") else ""))
    if v.get("estimate_ms") is not None:
        out.append(f"{'estimate':<10} {v['estimate_ms']:+.3f} ms (the agent's, declined)")
    # the commit
    sha = v.get("commit_sha")
    if sha and sha != v.get("base_sha"):
        merged = f", merged as {v['merged_sha'][:12]}" if v.get("merged_sha") and v["merged_sha"] != sha else ""
        out.append(f"{'commit':<10} {sha[:12]} on base {(v.get('base_sha') or '?')[:12]}{merged}")
        out += _indent(v["stat"]) if v.get("stat") else \
            [f"{'':<10} (not in this repository: git has no {sha[:12]})"] if v.get("stat") is None else []
    else:
        out.append(f"{'commit':<10} none" + (f" (base {v['base_sha'][:12]})" if v.get("base_sha") else ""))
    # the agent
    ag = v.get("agent")
    if ag:
        tally = []
        if ag.get("turns") is not None:
            tally.append(f"{ag['turns']} turns")
        if ag.get("tool_calls") is not None:
            tally.append(f"{len(ag['tool_calls'])} tool calls")
        if ag.get("tokens_in") is not None or ag.get("tokens_out") is not None:
            tally.append(f"tokens {ag.get('tokens_in') or 0} in / {ag.get('tokens_out') or 0} out")
        elif ag.get("tokens") is not None:
            tally.append(f"tokens {ag['tokens']}")
        if ag.get("cost_usd") is not None:
            tally.append(f"cost ${ag['cost_usd']:.4f}")
        out.append(f"{'agent':<10} {v['backend']}: " + (", ".join(tally) or "no tally recorded"))
        if ag.get("proposal"):
            said = ag.get("message") or ag.get("reason") or ""
            out.append(f"{'':<10} answered {ag['proposal']}" + (f": {said.splitlines()[0][:160]}" if said else ""))
        for i, c in enumerate(ag.get("tool_calls") or [], 1):
            out.append(f"{'':<10} {i:>3}. {c['call']}" + ("  (refused / error)" if c.get("error") else ""))
        if ag.get("transcript"):
            out.append(f"{'':<10} transcript {ag['transcript']}"
                       + ("" if ag.get("transcript_found") else " (not found)"))
    # the gates
    if v.get("scope") not in (None, "ok"):
        out.append(f"{'scope':<10} " + "; ".join(map(str, v["scope"] if isinstance(v["scope"], list) else [v["scope"]])))
    if v.get("conflict"):
        out.append(f"{'conflict':<10} {v['conflict']}")
    acc = v.get("accuracy")
    if acc:
        extra = f" ({acc['wall_s']:.0f} s)" if acc.get("wall_s") else ""
        out.append(f"{'accuracy':<10} {acc.get('verdict')}{extra}")
        for r in (acc.get("reasons") or [])[:8]:
            out.append(f"{'':<10} - {r}")
    b = v.get("bench")
    if b:
        out += _scorer_lines(b, "scorer")
        if b.get("reverify"):
            out += _scorer_lines(b["reverify"], "again")
    elif v["ledger"].get("delta_ms") is not None:
        led = v["ledger"]
        iv = led["interval"]
        out.append(f"{'scorer':<10} {led['delta_ms']:+.3f} ms [{_ms(iv[0], True)}, {_ms(iv[1], True)}] "
                   f"(the ledger's summary; runs/attempts/{v['number']}/judgment-*.json not found)")
        for rows in sorted((led.get("medians_b") or {}), key=int):
            out.append(f"{'':<10} {int(rows):>5} rows  A {_ms((led.get('medians_a') or {}).get(rows))} ms"
                       f"  B {_ms(led['medians_b'][rows])} ms")
    for w in v.get("last_words") or []:
        out.append(f"{'last words':<10} {w['side']} ended with {w['kind']}"
                   + (f" (log {w['log']})" if w.get("log") else ""))
        out += [f"{'':<10}   {ln}" for ln in w.get("lines") or []]
    out += _phase_lines(v.get("phases"))
    if v.get("judgments", 0) > 1:
        out.append(f"{'':<10} (the last of {v['judgments']} judgments: main moved and it was judged again)")
    h = v.get("hidden")
    if h:
        out.append(f"{'hidden':<10} input seed {h.get('input_seed')}, extra batch sizes "
                   f"{', '.join(map(str, h.get('extra_rows') or [])) or 'none'} (replay: kern test "
                   f"{(v.get('commit_sha') or '')[:12]} --vs {(v.get('base_sha') or '')[:12]} "
                   f"--replay-attempt {v['number']})")
    if v.get("brief"):
        out.append(f"{'brief':<10} ({v['files']}/brief.md)")
        out += _indent(v["brief"])
    if v.get("diff"):
        out.append(f"{'diff':<10} {(v.get('base_sha') or '')[:12]}..{(v.get('commit_sha') or '')[:12]}")
        out += v["diff"].rstrip("\n").splitlines()
    return out


# ----------------------------------------------------------------------------- the shell
def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def gather(repo: Path, attempt, want_diff: bool) -> dict:
    """What lies beside attempt ``attempt`` (its ledger row) under ``repo``: the files of
    :func:`attempt_view`."""
    d = repo / "runs" / "attempts" / str(attempt.number)
    brief = d / "brief.md"
    proposal = _read_json(d / "proposal.json")
    judgments = sorted(d.glob("judgment-*.json"), key=lambda p: int(p.stem.split("-")[1])
                       if p.stem.split("-")[1].isdigit() else 0)
    transcript = None
    path = (proposal or {}).get("transcript") or ""
    candidates = [Path(path)] if path else []
    candidates += sorted((repo / "runs" / "worktrees").glob(f"attempt-{attempt.number}.*"))
    found = next((p for p in candidates if p.is_file()), None)
    if found is not None:
        transcript = {"path": str(found), "lines": found.read_text(encoding="utf-8", errors="replace").splitlines()}
    elif path:
        transcript = {"path": path, "lines": None}
    stat = diff = None
    sha, base = attempt.commit_sha, attempt.base_sha
    if sha and base and sha != base:
        stat = git_or_none(repo, "diff", "--stat=100", base, sha)
        if want_diff and stat is not None:
            diff = git_or_none(repo, "diff", base, sha)
    return {"dir": str(d), "brief": brief.read_text(encoding="utf-8", errors="replace") if brief.is_file() else None,
            "proposal": proposal, "transcript": transcript,
            "judgments": [j for j in (_read_json(p) for p in judgments) if isinstance(j, dict)],
            "stat": stat, "diff": diff}


def cmd_show(args) -> int:
    from .shared import InputError
    from .report import _ledger_path, _no_ledger

    path = _ledger_path(args)
    if not path.exists():
        raise InputError(_no_ledger(args, path))
    try:
        with Ledger(path, readonly=True) as led:
            attempt, events = led.attempt(args.number), led.events(args.number)
    except LedgerError as e:
        if "is not in the ledger" not in str(e):  # the file, not the number: said as it is
            print(f"kern show: {e}", file=sys.stderr)
            return 2
        raise InputError(f"{e}: `kern status` and `kern report` list the attempts") from None
    repo = Path(args.repo).resolve()
    v = attempt_view(attempt, events, gather(repo, attempt, args.diff))
    if args.json:
        print(json.dumps(v, default=str, ensure_ascii=False))
    else:
        sys.stdout.write("\n".join(show_lines(v)) + "\n")
    return 0
