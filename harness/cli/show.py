"""``kern show N``: one attempt whole, from what the ledger and ``runs/attempts/<n>/`` hold.

What it was (title, backend, target, phase, tick), when (its events), the brief it was given
(``brief.md``), the commit (``git diff --stat`` base..commit; the diff with ``--diff``), the
agent's transcript (turns, tool calls, tokens, cost: :func:`transcript_summary` reads each
backend's format), every gate's result of its deciding judgment (``judgment-<k>.json``: the
accuracy verdict with its reasons, the scorer per bucket: both sides' medians, the change with
its interval, % of the roofline floor, failed checks; the re-measurement), the last words of
a side that ended badly (its log's last lines and path), its hidden inputs and how it ended.
The files are read here (:func:`gather`, typed :class:`ShowFiles`), the typed
:class:`AttemptView` is built by the pure :func:`attempt_view` and printed by the pure
:func:`show_lines` (the gates' parts rendered by harness/terminal.py); ``--json`` prints
:meth:`AttemptView.to_dict`. The scorer per bucket is the one view every reader shows
(gates/results.py ``ScorerView``, as the journey's page and JSON export show it). Reading
never creates a ledger.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from typing import TYPE_CHECKING

from ..gitcmd import git_or_none
from ..ledger import Attempt, Ledger, LedgerError
from ..progress import fmt_duration
from .shared import MAX_ATTEMPT, whole

if TYPE_CHECKING:  # what the view holds; read from the gates' modules only where shown
    from gates.rules.phases import JudgmentTimes
    from gates.results import AccuracyResult, LastWords, ScorerView

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


def _parsed(of, report):
    """``of(report)``, or None when there is no report or it is cut short or edited."""
    if not report:
        return None
    try:
        return of(report)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _last_words(gate, judgment: dict) -> tuple:
    """Pure: every side of the deciding judgment that ended badly, in its own words (the
    judgment file's reports), else what the ledger row kept (``gate.last_words``)."""
    from gates.results import AccuracyResult, BenchResult

    test = _parsed(AccuracyResult.of, judgment.get("test"))
    bench = _parsed(BenchResult.of, judgment.get("bench"))
    words = []
    if not ((judgment.get("test") and test is None) or (judgment.get("bench") and bench is None)):
        words += test.last_words if test is not None else ()
        if bench is not None:  # a report edited or cut short: none of the file's words
            words += [w for w in (bench.last_words, bench.reverify.last_words if bench.reverify else None) if w]
    if not words and gate is not None and gate.last_words is not None:
        words = [gate.last_words]
    return tuple(words)


@dataclass(frozen=True)
class ShowFiles:
    """What lies beside an attempt's ledger row, read by the shell (:func:`gather`)."""

    dir: str | None = None  # runs/attempts/<n>
    brief: str | None = None  # brief.md's text
    proposal: dict | None = None  # proposal.json: the agent's answer
    transcript: str | None = None  # the transcript's path, where one is named or found
    transcript_lines: tuple[str, ...] | None = None  # None: not found
    judgments: tuple[dict, ...] = ()  # the judgment files' JSON, in order
    stat: str | None = None  # git diff --stat base..commit (None: git has no such commit)
    diff: str | None = None


@dataclass(frozen=True)
class AgentView:
    """What the attempt's agent said and spent: its answer (``proposal.json``) and its
    transcript's tally (:func:`transcript_summary`), the ledger's tokens and cost."""

    proposal: str | None = None  # the answer's kind: commit, decline, ...
    message: str | None = None
    reason: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    tokens: int | None = None  # the ledger's
    cost_usd: float | None = None
    transcript: str | None = None  # its path
    transcript_found: bool = False
    format: str | None = None  # None: no transcript read
    turns: int | None = None
    tool_calls: tuple[dict, ...] | None = None  # each {"call": one line, "error": refused}

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("proposal", "message", "reason", "tokens_in", "tokens_out",
                                             "tokens", "cost_usd", "transcript", "transcript_found")}
        if self.format is not None:
            out.update(format=self.format, turns=self.turns, tool_calls=list(self.tool_calls or ()))
        return out


@dataclass(frozen=True)
class AttemptView:
    """Everything ``kern show`` says of one attempt, typed: the ledger row and its events, what
    lies beside it, the gates of its deciding judgment (the last ``judgment-<k>.json``; the
    ledger row's summary where there is none). :func:`show_lines` prints it, ``--json`` prints
    :meth:`to_dict`."""

    attempt: Attempt
    events: tuple = ()  # its ledger events (created, transitions)
    files_dir: str | None = None
    brief: str | None = None
    stat: str | None = None  # git diff --stat base..commit; None: git has no such commit
    diff: str | None = None
    agent: AgentView | None = None
    judgments: int = 0  # judgment files beside it (more than one: main moved, judged again)
    accuracy: AccuracyResult | None = None  # of the judgment file's test report
    scorer: ScorerView | None = None  # the file's A/B, else the ledger row's
    last_words: tuple[LastWords, ...] = ()  # of each side that ended badly
    times: JudgmentTimes | None = None  # of the judgment file
    times_recorded: bool = False  # kept by the judgment itself (else read from its reports)

    @property
    def source(self) -> str | None:
        """What its agent was handed beside the brief (the replay backend's patch file)."""
        return next((_data(e, "source") for e in self.events if e.kind == "created"), None)

    @property
    def took_s(self) -> float | None:
        a = self.attempt
        return _since(a.created_at, a.finished_at or a.updated_at)

    def to_dict(self) -> dict:
        """The JSON ``kern show --json`` prints."""
        from gates.rules.phases import GATES

        a, gate = self.attempt, self.attempt.gate
        summary = {} if gate is None else gate.to_dict()
        acc = self.accuracy
        if acc is not None:
            sides = {"a": acc.outcome_a, "b": acc.outcome_b, "noise": acc.outcome_noise}
            accuracy = {"verdict": acc.verdict, "reasons": list(acc.reasons), "rows": acc.report.get("rows"),
                        "wall_s": acc.wall_s, "sides": {k: o for k, o in sides.items() if o}}
        else:
            accuracy = summary.get("accuracy")
        t = self.times
        return {
            "number": a.number, "title": a.title, "state": a.state, "reason": a.reason,
            "decision": a.decision, "backend": a.backend, "target": a.target or None,
            "phase": a.phase_id, "tick": a.tick_id, "source": self.source,
            "hypothesis": a.hypothesis or None,
            "base_sha": a.base_sha, "commit_sha": a.commit_sha, "merged_sha": a.merged_sha,
            "parts": a.parts, "rerun_of": a.rerun_of, "estimate_ms": a.estimate_ms,
            "created_at": a.created_at, "finished_at": a.finished_at, "took_s": self.took_s,
            "times": [{"at": e.at, "kind": e.kind, "from": _data(e, "from"), "to": _data(e, "to"),
                       "reason": _data(e, "reason")} for e in self.events],
            "host": a.host, "slot": a.slot, "files": self.files_dir,
            "brief": self.brief, "stat": self.stat, "diff": self.diff,
            "agent": None if self.agent is None else self.agent.to_dict(),
            "judgments": self.judgments,
            "scope": summary.get("scope"), "conflict": summary.get("conflict"),
            "accuracy": accuracy,
            "bench": None if self.scorer is None else self.scorer.to_dict(),
            "last_words": [w.to_dict() for w in self.last_words],
            "phases": None if t is None else {
                "accuracy_s": t.accuracy_s, "scorer_s": t.scorer_s, "remeasure_s": t.remeasure_s,
                "total_s": t.total_s, "recorded": self.times_recorded,
                "gates": {g: t.by_part(g) for g in GATES if t.by_part(g)},
                # off the path (not in "gates"): what ran beside what, and for how long
                "overlap_s": t.overlap_s, "beside": [b.view() for b in t.beside]},
            "ledger": {"delta_ms": a.delta_ms, "interval": [a.ci_low, a.ci_high], "delta_pct": a.delta_pct,
                       "medians_a": a.medians_a, "medians_b": a.medians_b,
                       "gate": None if gate is None else summary},
            "hidden": a.hidden,
        }


def _data(event, key: str):
    return event.data.get(key) if isinstance(event.data, dict) else None


def _agent(a, files: ShowFiles) -> AgentView | None:
    """Pure: the agent's part (None when nothing of it was recorded)."""
    proposal = files.proposal or {}
    found = files.transcript_lines is not None
    summary = transcript_summary(list(files.transcript_lines)) if found else None
    if not (proposal or summary or a.tokens or a.cost_usd):
        return None
    summary = summary or {}
    return AgentView(
        proposal=proposal.get("kind"), message=proposal.get("message") or None,
        reason=proposal.get("reason") or None,
        tokens_in=proposal.get("tokens_in", summary.get("tokens_in")),
        tokens_out=proposal.get("tokens_out", summary.get("tokens_out")), tokens=a.tokens,
        cost_usd=a.cost_usd if a.cost_usd is not None else proposal.get("cost_usd"),
        transcript=files.transcript, transcript_found=found, format=summary.get("format"),
        turns=summary.get("turns"),
        tool_calls=None if "tool_calls" not in summary else tuple(summary["tool_calls"]))


def attempt_view(attempt, events: list, files: ShowFiles) -> AttemptView:
    """Pure: everything ``kern show`` says of one attempt. ``attempt``: its ledger row;
    ``events``: its ledger events; ``files``: what was read beside it."""
    from gates.results import AccuracyResult
    from gates.rules.phases import JudgmentTimes

    from ..journey import judgment_view

    last = files.judgments[-1] if files.judgments else {}
    scorer = judgment_view(attempt, last)
    judged = bool(last.get("test") or last.get("bench"))
    return AttemptView(
        attempt=attempt, events=tuple(e for e in events if e.kind in ("created", "transition")),
        files_dir=files.dir, brief=files.brief, stat=files.stat, diff=files.diff,
        agent=_agent(attempt, files), judgments=len(files.judgments),
        accuracy=_parsed(AccuracyResult.of, last.get("test")),
        scorer=scorer if scorer.from_judgment or scorer.measured else None,
        last_words=_last_words(attempt.gate, last),
        times=JudgmentTimes.of_judgment(last) if judged else None,
        times_recorded=last.get("times") is not None)


# ----------------------------------------------------------------------------- the lines
def _dur(s: float | None) -> str:
    return "?" if s is None else fmt_duration(round(s), ("s", "min", "h"), " ")


def _indent(text: str, pad: str = "           ") -> list[str]:
    return [pad + ln if ln else "" for ln in text.rstrip("\n").splitlines()]


def show_lines(v: AttemptView) -> list[str]:
    """Pure: the view as the lines ``kern show`` prints, one section a block (the gates'
    results rendered by harness/terminal.py)."""
    from .. import terminal
    from ..journey import hidden_text

    a, gate = v.attempt, v.attempt.gate
    out = [f"{'attempt':<10} #{a.number} {a.state}" + (f" ({a.reason})" if a.reason else "") + f": {a.title}"]
    facts = [f"backend {a.backend or '-'}", f"target {a.target or '-'}",
             f"phase {a.phase_id if a.phase_id is not None else '-'}"]
    if a.tick_id is not None:
        facts.append(f"tick {a.tick_id}")
    if v.source:
        facts.append(f"handed {v.source}")
    if a.host:
        facts.append(f"judged on {a.host} {a.slot or ''}".rstrip())
    if a.parts:
        facts.append(f"trial merge of {', '.join('#' + str(p) for p in a.parts)}")
    if a.rerun_of:
        facts.append(f"re-run of #{a.rerun_of}")
    out.append(f"{'':<10} " + " · ".join(facts))
    out.append(f"{'times':<10} created {a.created_at}"
               + (f", final {a.finished_at} ({_dur(v.took_s)})" if a.finished_at else
                  f", not final yet ({_dur(v.took_s)} so far)"))
    for e in v.events:
        if e.kind == "transition":
            out.append(f"{'':<10} {e.at}  {_data(e, 'from')} → {_data(e, 'to')}"
                       + (f": {_data(e, 'reason')}" if _data(e, "reason") else ""))
    if a.estimate_ms is not None:
        out.append(f"{'estimate':<10} {a.estimate_ms:+.3f} ms (the agent's, declined)")
    # the commit
    sha = a.commit_sha
    if sha and sha != a.base_sha:
        merged = f", merged as {a.merged_sha[:12]}" if a.merged_sha and a.merged_sha != sha else ""
        out.append(f"{'commit':<10} {sha[:12]} on base {(a.base_sha or '?')[:12]}{merged}")
        out += _indent(v.stat) if v.stat else \
            [f"{'':<10} (not in this repository: git has no {sha[:12]})"] if v.stat is None else []
    else:
        out.append(f"{'commit':<10} none" + (f" (base {a.base_sha[:12]})" if a.base_sha else ""))
    # the agent
    ag = v.agent
    if ag is not None:
        tally = []
        if ag.turns is not None:
            tally.append(f"{ag.turns} turns")
        if ag.tool_calls is not None:
            tally.append(f"{len(ag.tool_calls)} tool calls")
        if ag.tokens_in is not None or ag.tokens_out is not None:
            tally.append(f"tokens {ag.tokens_in or 0} in / {ag.tokens_out or 0} out")
        elif ag.tokens is not None:
            tally.append(f"tokens {ag.tokens}")
        if ag.cost_usd is not None:
            tally.append(f"cost ${ag.cost_usd:.4f}")
        out.append(f"{'agent':<10} {a.backend}: " + (", ".join(tally) or "no tally recorded"))
        if ag.proposal:
            said = ag.message or ag.reason or ""
            out.append(f"{'':<10} answered {ag.proposal}" + (f": {said.splitlines()[0][:160]}" if said else ""))
        for i, c in enumerate(ag.tool_calls or (), 1):
            out.append(f"{'':<10} {i:>3}. {c['call']}" + ("  (refused / error)" if c.get("error") else ""))
        if ag.transcript:
            out.append(f"{'':<10} transcript {ag.transcript}" + ("" if ag.transcript_found else " (not found)"))
    # the gates
    if gate is not None and gate.scope_problems:
        out.append(f"{'scope':<10} " + "; ".join(gate.scope_problems))
    if gate is not None and gate.conflict:
        out.append(f"{'conflict':<10} {gate.conflict}")
    out += terminal.accuracy_lines(v.accuracy if v.accuracy is not None else
                                   gate.accuracy if gate is not None else None)
    out += terminal.view_lines(v.scorer, a.number)
    out += terminal.last_words_lines(v.last_words)
    out += terminal.phase_lines(v.times, v.times_recorded)
    if v.judgments > 1:
        out.append(f"{'':<10} (the last of {v.judgments} judgments: main moved and it was judged again)")
    if a.hidden:
        out.append(f"{'hidden':<10} {hidden_text(a.hidden)} (replay: kern test "
                   f"{(a.commit_sha or '')[:12]} --vs {(a.base_sha or '')[:12]} "
                   f"--replay-attempt {a.number})")
    if v.brief:
        out.append(f"{'brief':<10} ({v.files_dir}/brief.md)")
        out += _indent(v.brief)
    if v.diff:
        out.append(f"{'diff':<10} {(a.base_sha or '')[:12]}..{(a.commit_sha or '')[:12]}")
        out += v.diff.rstrip("\n").splitlines()
    return out


# ----------------------------------------------------------------------------- the shell
def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def gather(repo: Path, attempt, want_diff: bool) -> ShowFiles:
    """What lies beside attempt ``attempt`` (its ledger row) under ``repo``: the files of
    :func:`attempt_view`."""
    d = repo / "runs" / "attempts" / str(attempt.number)
    brief = d / "brief.md"
    proposal = _read_json(d / "proposal.json")
    proposal = proposal if isinstance(proposal, dict) else None
    judgments = sorted(d.glob("judgment-*.json"), key=lambda p: int(p.stem.split("-")[1])
                       if p.stem.split("-")[1].isdigit() else 0)
    path = (proposal or {}).get("transcript") or ""
    candidates = [Path(path)] if path else []
    candidates += sorted((repo / "runs" / "worktrees").glob(f"attempt-{attempt.number}.*"))
    found = next((p for p in candidates if p.is_file()), None)
    stat = diff = None
    sha, base = attempt.commit_sha, attempt.base_sha
    if sha and base and sha != base:
        stat = git_or_none(repo, "diff", "--stat=100", base, sha)
        if want_diff and stat is not None:
            diff = git_or_none(repo, "diff", base, sha)
    return ShowFiles(
        dir=str(d), brief=brief.read_text(encoding="utf-8", errors="replace") if brief.is_file() else None,
        proposal=proposal, transcript=str(found) if found is not None else (path or None),
        transcript_lines=None if found is None else tuple(
            found.read_text(encoding="utf-8", errors="replace").splitlines()),
        judgments=tuple(j for j in (_read_json(p) for p in judgments) if isinstance(j, dict)),
        stat=stat, diff=diff)


def cmd_show(args) -> int:
    from .report import _ledger_path, _no_ledger
    from .shared import InputError

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
        print(json.dumps(v.to_dict(), default=str, ensure_ascii=False))
    else:
        sys.stdout.write("\n".join(show_lines(v)) + "\n")
    return 0
