"""``kern report`` and ``kern status``: read the ledger, print or write what it says.

A thin shell: it opens ``runs/ledger.sqlite`` under ``--repo`` (never creating it: a report of
nothing must not leave a file behind), hands the records to the pure renderers of
:mod:`harness.journey` and :func:`status_data`, and prints. The clock is read once, here.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from .. import journey
from .shared import add_mkdir_flag, examples, out_file
from ..ledger import IN_FLIGHT, STATES, Ledger, LedgerError, default_path

NO_LEDGER = ("no ledger at {path}: nothing has been tried in this repository yet "
             "(run `kern try REV` or `kern loop` first)")
DEMO_LEDGER = "; the newest demo's ledger is in {demo}: kern --repo {demo} {verb}"


def register(sub) -> None:
    p = sub.add_parser(
        "report", **examples(
            'kern report                           the journey as Markdown',
            'kern report --format html --out journey.html  one page with the plot',
            'kern report --format csv --lang zh --out journey.csv',
            'kern report --plot journey.png        the plot alone'),
        help="the journey table (Markdown, CSV, JSON, HTML)",
        description="The journey from the ledger (runs/ledger.sqlite under --repo): how a score change "
                    "is estimated (B − A per bucket: A's median x (B/A − 1), B/A the paired median "
                    "ratio), "
                    "one table per phase (# | attempt | score change (ms) | result; the re-measured "
                    "change where a large gain was measured again), a note that scores of different "
                    "phases are not comparable, and a summary of merges, gain and main's scores. An "
                    "attempt that tried "
                    "nothing (declined with no estimated gain) is no row; the phase names it. HTML is "
                    "one self-contained page (no server, nothing fetched): per phase a plot (x the "
                    "attempt's position in its phase, main's score as a line from the phase's start "
                    "through every merge, every measured attempt at its B score with its interval, the "
                    "never-measured in a strip below the axis) and a table whose columns sort and whose "
                    "rows filter by result and fold out the commands (kern show N, the replay), every "
                    "reason whole, the change per bucket with its interval and % of floor, and the "
                    "commit's diff (read from runs/attempts/<n>/ and git). JSON carries every field "
                    "of the CSV and the page.")
    p.add_argument("--format", default="md", choices=("md", "csv", "json", "html"),
                   help="output format (default: md)")
    p.add_argument("--lang", default="en", choices=tuple(journey.TEXT),
                   help="language of every string the journey writes in the table and the page "
                        "(recorded text, such as titles and the gates' reasons, stays as recorded; "
                        "the --plot PNG is English) (default: en)")
    p.add_argument("--out", default=None, help="write here instead of standard output")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="write the journey's plot as a PNG or an SVG, by the file's suffix (.png, "
                        ".svg); the table is then written only with --out")
    add_mkdir_flag(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "status", **examples(
            "kern status                           budgets, attempts in flight, main's score, why it stopped",
            'kern status --json | jq .budget       the same as JSON'),
        help="main's score, phase, attempts by state, budget used, how the loop stopped",
        description="Main's score and phase, attempts by state, budget used against kern.yaml's "
                    "budgets, the attempts in flight, and how and when the last run stopped (ticks "
                    "reached, budget spent, idle, interrupted, halted), or that a loop still runs "
                    "it. Reads the ledger only; with no ledger, names the newest demo's.")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_status)


def _ledger_path(args) -> Path:
    return default_path(Path(args.repo).resolve())


def _no_ledger(args, path: Path) -> str:
    """Why there is no ledger to read: none was made yet (and where the newest demo's is, when
    ``kern loop --demo`` made one here), or ``--repo`` is no repository (:class:`InputError`: a
    loop could never have written one there)."""
    from .shared import repo_root

    repo = repo_root(args)
    demos = repo / "runs" / "demo"
    names = [d.name for d in demos.iterdir() if d.is_dir()] if demos.is_dir() else []
    demo = newest_demo(names, {n for n in names if default_path(demos / n).is_file()})
    text = NO_LEDGER.format(path=path)
    if demo is None:
        return text
    where = demos / demo
    try:
        where = where.relative_to(Path.cwd())
    except ValueError:
        pass
    return text + DEMO_LEDGER.format(demo=where, verb=getattr(args, "verb", None) or "status")


def newest_demo(names: list[str], with_ledger: set[str]) -> str | None:
    """Pure: the newest of ``kern loop --demo``'s repositories (``runs/demo/<stamp>``, stamps
    that sort by time) holding a ledger, else the newest of all; None when there is none."""
    ok = sorted(n for n in names if n in with_ledger)
    return ok[-1] if ok else (sorted(names)[-1] if names else None)


def cmd_report(args) -> int:
    path = _ledger_path(args)
    if not path.exists():
        print(f"kern report: {_no_ledger(args, path)}", file=sys.stderr)
        return 1
    repo = Path(args.repo).resolve()
    # the files are checked before anything is read: a bad name costs nothing
    plot = out_file(args.plot, repo, "--plot", args.mkdir, suffixes=(".png", ".svg"))
    out = out_file(args.out, repo, "--out", args.mkdir)
    try:
        with Ledger(path, readonly=True) as led:
            attempts, phases, scores = led.attempts(), led.phases(), led.scores()
    except LedgerError as e:
        print(f"kern report: {e}", file=sys.stderr)
        return 2
    if plot is not None:
        png = journey.plot_png(attempts, phases, scores, fmt=plot.suffix.lower()[1:])
        if png is None:
            print("kern report: nothing to plot: the ledger holds no attempt and no score yet "
                  "(run `kern try REV` or `kern loop` first)", file=sys.stderr)
            return 1
        dest = plot
        dest.write_bytes(png)
        print(f"wrote      {dest}  ({len(attempts)} attempts, {len(phases)} phase(s))")
        if not args.out:
            return 0
    if args.format == "md":
        text = journey.markdown(attempts, phases, lang=args.lang, scores=scores)
    elif args.format == "csv":
        text = journey.csv_text(attempts, phases, lang=args.lang)
    elif args.format == "json":
        text = json.dumps(journey.json_obj(attempts, phases, scores,
                                           files=attempt_files(Path(args.repo).resolve(), attempts)),
                          indent=1, ensure_ascii=False) + "\n"
    else:
        text = journey.html(attempts, phases, scores, lang=args.lang,
                            files=attempt_files(Path(args.repo).resolve(), attempts))
    if out is not None:
        out.write_text(text, encoding="utf-8")
        print(f"wrote      {out}  ({len(attempts)} attempts, {len(phases)} phase(s))")
    else:
        sys.stdout.write(text)
    return 0


# --------------------------------------------------------------------------- the page's files
DIFF_BYTES = 2_000_000  # one attempt's diff kept in the page at most (a vendored file would be more)


def _diff(repo: Path, base: str | None, commit: str | None) -> tuple[str | None, str]:
    """(the diff of base..commit, '') or (None, why there is none)."""
    if not commit:
        return None, ""
    if not (repo / ".git").exists():
        return None, f"{repo} is not a git repository"
    from ..gitcmd import GitError, git, git_or_none

    for sha in (commit, base):
        if sha and git_or_none(repo, "cat-file", "-e", f"{sha}^{{commit}}", timeout=120) is None:
            return None, f"commit {sha[:10]} is not in this repository"
    spec = [f"{base}..{commit}"] if base else [commit]
    try:
        text = git(repo, "diff", "--no-color", "--no-ext-diff", *spec, timeout=120) if base else \
            git(repo, "show", "--no-color", "--format=", commit, timeout=120)
    except GitError as e:
        return None, f"git diff {' '.join(spec)} failed: {e.said[:200]}"
    if len(text) > DIFF_BYTES:
        text = text[:DIFF_BYTES].rsplit("\n", 1)[0] + "\n"
    return text, ""


def _judgment(folder: Path) -> dict | None:
    """The last judgment's file of an attempt, parsed (None when absent or unreadable)."""
    found = sorted(folder.glob("judgment-*.json"),
                   key=lambda p: int(p.stem.split("-")[-1]) if p.stem.split("-")[-1].isdigit() else 0)
    for path in reversed(found):
        try:
            data = json.loads(path.read_text(errors="replace"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def attempt_files(repo: Path, attempts) -> dict:
    """What the journey page shows beside each ledger row, read from disk and git: the brief
    (``runs/attempts/<n>/brief.md``), the last judgment's file, and the diff of the attempt's
    base..commit when this repository has both commits."""
    out = {}
    for a in journey.shown(attempts):
        folder = repo / "runs" / "attempts" / str(a.number)
        brief = folder / "brief.md"
        diff, why = _diff(repo, a.base_sha, a.commit_sha)
        out[a.number] = journey.AttemptFiles(
            brief=brief.read_text(errors="replace") if brief.is_file() else None,
            diff=diff, diff_missing=why, judgment=_judgment(folder))
    return out


def page(repo: Path, led: Ledger, lang: str = "en") -> str:
    """The journey page of the ledger ``led`` of repository ``repo`` (kern report, kern loop --demo)."""
    attempts = led.attempts()
    return journey.html(attempts, led.phases(), led.scores(), lang=lang,
                        files=attempt_files(repo, attempts))


# --------------------------------------------------------------------------- status
def _hours_between(start: str, now: datetime) -> float | None:
    try:
        t = datetime.fromisoformat(start)
    except (TypeError, ValueError):
        return None
    if t.tzinfo is None:  # a naive stamp was written by a naive clock: compare naive
        now = now.replace(tzinfo=None)
    return max(0.0, (now - t).total_seconds() / 3600)


def status_data(*, path: str, attempts: list, phases: list, current_phase_id: int | None,
                scores: list, runs: list, run_usage: dict | None, budgets: dict | None,
                now: datetime, stops: dict | None = None, loop_holder: str | None = None) -> dict:
    """Everything ``kern status`` says, as one object (pure: the caller passes ``now``).
    ``stops``: run id -> :class:`~harness.ledger.RunEnd`; ``loop_holder``: who holds the
    repository's loop lock now (None: no loop runs), which tells a live run from one killed
    outright when its end is not recorded."""
    by_state = {s: 0 for s in STATES}
    for a in attempts:
        by_state[a.state] = by_state.get(a.state, 0) + 1
    phase = next((p for p in phases if p.id == current_phase_id), None)
    main = next((s for s in reversed(scores) if s.phase_id == current_phase_id), None)
    run = runs[-1] if runs else None
    end = (stops or {}).get(run.id) if run is not None else None
    budgets = budgets or {}
    return {
        "ledger": path,
        "phase": None if phase is None else {"id": phase.id, "definition": phase.definition,
                                              "started_at": phase.started_at},
        "main": None if main is None else {"score_ms": main.score_ms, "sha": main.sha,
                                            "at": main.at, "phase": main.phase_id},
        "attempts": len(attempts),
        "by_state": {s: n for s, n in by_state.items() if n},
        "budget": {
            "attempts": {"used": len(attempts), "limit": budgets.get("attempts")},
            "tokens": {"used": sum(a.tokens or 0 for a in attempts), "limit": budgets.get("tokens")},
            "cost_usd": {"used": round(sum(a.cost_usd or 0.0 for a in attempts), 6),
                         "limit": budgets.get("cost_usd")},
            "wall_hours": {"used": None if run is None else _hours_between(
                run.started_at, _parse(end.at) or now if end is not None else now),
                           "limit": budgets.get("wall_hours")},
        },
        "run": None if run is None else {
            "id": run.id, "started_at": run.started_at, "host": run.host, "usage": run_usage,
            "stopped": None if end is None else {"at": end.at, "how": end.how, "reason": end.reason},
            # no end recorded: the loop that holds the lock runs it, or it was killed outright
            "running": loop_holder if end is None else None},
        "in_flight": [{"#": a.number, "state": a.state, "target": a.target, "title": a.title,
                       "backend": a.backend, "since": a.updated_at}
                      for a in attempts if a.state in IN_FLIGHT],
    }


def _parse(stamp: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo is not None else None


def _used(u: dict, fmt: str = "{}") -> str:
    used = "?" if u["used"] is None else fmt.format(u["used"])
    return used + ("" if u["limit"] is None else " / " + fmt.format(u["limit"]))


def status_lines(d: dict) -> list[str]:
    """One fact per line, sections aligned; the last line is main's score."""
    out = [f"{'ledger':<10} {d['ledger']}"]
    p = d["phase"]
    out.append(f"{'phase':<10} " + ("none yet (no score definition recorded)" if p is None else
                                    f"{p['id']} · {journey.describe(p['definition'])} "
                                    f"(since {p['started_at']})"))
    states = " · ".join(f"{s} {n}" for s, n in d["by_state"].items())
    out.append(f"{'attempts':<10} {d['attempts']}" + (f": {states}" if states else ""))
    b = d["budget"]
    out.append(f"{'budget':<10} attempts {_used(b['attempts'])} · tokens {_used(b['tokens'])} · "
               f"cost {_used(b['cost_usd'], '${:.2f}')} · wall {_used(b['wall_hours'], '{:.1f}')} h"
               + (" (since run started)" if d["run"] else ""))
    if d.get("config_problem"):
        out.append(f"{'':<10} limits unknown: {d['config_problem']}")
    if d["run"]:
        r = d["run"]
        u = r["usage"] or {}
        end = r.get("stopped")
        span = f"from {r['started_at']} to {end['at']}" if end else f"since {r['started_at']}"
        out.append(f"{'run':<10} #{r['id']} on {r['host']} {span}: "
                   f"{u.get('attempts', 0)} attempts, {u.get('tokens', 0)} tokens")
        if end:
            out.append(f"{'stopped':<10} {end['at']} · " + (f"{end['how']}: " if end["how"] else "")
                       + end["reason"])
        elif r.get("running"):
            out.append(f"{'running':<10} the loop of {r['running']} (it holds runs/loop.lock)")
        else:
            out.append(f"{'stopped':<10} no end recorded and no loop holds runs/loop.lock: the "
                       f"loop was killed outright (SIGKILL, a crash, a power cut); `kern loop` "
                       f"resumes where it stopped")
    if d["in_flight"]:
        for i, a in enumerate(d["in_flight"]):
            out.append(f"{'in flight' if i == 0 else '':<10} #{a['#']} {a['state']:<8} "
                       f"{titled(a['target'], a['title'])} (since {a['since']})")
    else:
        out.append(f"{'in flight':<10} none")
    m = d["main"]
    out.append(f"{'main':<10} " + ("no score recorded yet" if m is None else
                                   f"{m['score_ms']:.3f} ms (phase {m['phase']}, {m['sha'][:12]}, "
                                   f"{m['at']})"))
    return out


def titled(target: str | None, title: str) -> str:
    """Pure: ``target: title``, the target once: the loop's titles already start with it."""
    target = target or "-"
    return title if title.startswith(target + ":") or title == target else f"{target}: {title}"


def cmd_status(args) -> int:
    path = _ledger_path(args)
    if not path.exists():
        msg = _no_ledger(args, path)
        if args.json:
            print(json.dumps({"ledger": str(path), "exists": False, "message": msg}))
        else:
            print(f"{'ledger':<10} {msg}")
        return 0
    from .shared import settings_of
    from ..settings import SettingsError

    # Status is read-only diagnosis: a missing or broken kern.yaml costs only the limits.
    try:
        budgets, config_problem = dataclasses.asdict(
            settings_of(args, Path(args.repo).resolve()).resolve(False).budgets), None
    except SettingsError as e:
        budgets, config_problem = None, str(e).splitlines()[0]
    try:
        with Ledger(path, readonly=True) as led:
            runs = led.runs()
            snap = dict(path=str(path), attempts=led.attempts(), phases=led.phases(),
                        current_phase_id=led.current_phase_id(), scores=led.scores(), runs=runs,
                        run_usage=led.usage(runs[-1].id) if runs else None, stops=led.stops())
    except LedgerError as e:
        print(f"kern status: {e}", file=sys.stderr)
        return 2
    from ..processes import loop_holder

    snap["loop_holder"] = loop_holder(path.parent)  # runs/: the ledger's folder
    d = status_data(**snap, budgets=budgets, now=datetime.now(timezone.utc))
    d["config_problem"] = config_problem
    if args.json:
        print(json.dumps({**d, "exists": True}, ensure_ascii=False))
    else:
        print("\n".join(status_lines(d)))
    return 0
