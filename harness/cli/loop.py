"""``kern try``, ``kern brief`` and ``kern loop``: the loop's verbs (one commit through every
gate, the brief an attempt would get, the orchestrator), their arguments and the live view."""
from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..ledger import IN_FLIGHT, RUN_HALTED, RUN_INTERRUPTED, RUN_TICKS
from ..progress import fmt_elapsed
from .shared import MAX_ATTEMPT, add_mkdir_flag, examples, seconds, whole


def register(sub) -> None:
    p = sub.add_parser(
        "try", **examples(
            'kern try HEAD                         judge your last commit; merge it if it wins',
            'kern try my-branch --title "moe: block_m 32"  with the ledger row\'s title'),
        help="all gates on one commit, then a ledger row (and a merge if it wins)",
        description="Scope -> bit-identity/accuracy -> A/B scorer -> guard -> decision -> ledger "
                    "row -> fast-forward main if accepted (rebased and judged again if main moved). "
                    "REV must be a commit main does not hold yet (a change committed on a branch), "
                    "and one no attempt judged before (unless --again). Ctrl-C or SIGTERM ends the "
                    "attempt as interrupted. Exit 0 merged, 1 not merged, 2 refused before "
                    "judging, 130 interrupted.")
    p.add_argument("rev", help="the commit to judge")
    p.add_argument("--title", default=None, help="the ledger row's title (default: the commit's subject)")
    p.add_argument("--target", default=None,
                   help="the profile row the commit works on (default: the op(s) its files belong to)")
    p.add_argument("--again", action="store_true",
                   help="judge a commit the ledger already holds a verdict for, as a new attempt")
    p.set_defaults(func=cmd_try)

    p = sub.add_parser(
        "cancel", **examples(
            'kern cancel 12                        end attempt 12 (queued, waiting, running or judging)',
            'kern cancel 12 --reason "wrong base"  with the reason the ledger keeps'),
        help="end an attempt in flight: its ledger row becomes interrupted, with a reason",
        description="End attempt N while it is queued, waiting, running (its agent is stopped) or "
                    "judging (the kern try judging it is stopped and records it): its ledger row "
                    "becomes 'interrupted' with 'cancelled: REASON', and no loop judges it again. "
                    "An attempt a running kern loop holds is refused: stop that loop first. "
                    "Exit 0 cancelled, 1 its kern try did not stop in time, 2 nothing to cancel.")
    p.add_argument("number", type=whole(1, MAX_ATTEMPT, "an attempt number"), metavar="N",
                   help="the attempt (kern status lists those in flight)")
    p.add_argument("--reason", default="no reason given", help="why, kept in the ledger row")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser(
        "brief", **examples(
            "kern brief moe.experts                 the brief of main's profile in runs/profile/",
            "kern brief mla.topk --profile bench/results/2026-12-03-h200-profile-128-loop-0f870c4.json --out brief.md",
            "kern brief 'dense projections (cuBLAS)' --json"),
        help="the brief the orchestrator would write now for a target (for a person or an outside agent)",
        description="Render prompts/subagent.md for TARGET as the loop's next attempt would get it: "
                    "the profile of main (its time, floor at the card's read ceiling, headroom), "
                    "what the journey shows was tried on it, the rules and the shapes. Reads the "
                    "profile the loop measured for main (or kern profile's), or --profile FILE; "
                    "writes nothing.")
    p.add_argument("target", help="a row of the profile: an op (moe.experts) or 'dense projections (cuBLAS)'")
    p.add_argument("--profile", default=None,
                   help="a profile JSON (kern profile --out, or bench/results/*-profile-*.json) instead of "
                        "the one measured for main in runs/profile/")
    p.add_argument("--json", action="store_true", help="print the brief as one JSON object (text and fields)")
    p.add_argument("--out", default=None, help="also write the brief's text to this file")
    add_mkdir_flag(p)
    p.set_defaults(func=cmd_brief)

    p = sub.add_parser(
        "loop", **examples(
            'kern loop                             foreground with a live view, every loop.every',
            'kern loop --every 1h --set budgets.cost_usd=20  hourly, at most $20 of agent cost',
            'kern loop --tick >> loop.log 2>&1     one tick (cron: */20 * * * * cd REPO && kern loop --tick)',
            'kern loop --demo --ticks 4 --every 1s --wait-agents 120 --no-live  the demo on a CPU'),
        help="the orchestrator: plan, brief agents, judge, merge",
        description="Run ticks: collect finished attempts and judge them under a GPU lock, plan "
                    "targets from the latest profile and the journey, render briefs from prompts/, "
                    "spawn up to loop.concurrency agents. Stops when a budget is spent (attempts, tokens, "
                    "cost, wall hours; the attempts in flight finish first, but no judgment starts that "
                    "could outlast the wall hours: those wait, queued, for the next loop) or when agents report "
                    "nothing left for loop.stop_after_idle_ticks ticks. State lives in the ledger, "
                    "so a killed loop resumes where it stopped. Exit 0; 3 when another loop holds "
                    "this repository; 4 when the loop stopped because nothing more could be "
                    "written (a full disk: free space, then start it again); 2 when kern.yaml's farm "
                    "does not fit (a slot this machine lacks, Ray missing or farm.address unreachable).")
    p.add_argument("--every", default=None, type=duration, metavar="DURATION",
                   help="time between ticks: 90s, 20m, 1h or 1d, from kern.yaml's loop.min_every "
                        "(1s) to 30d (default: kern.yaml loop.every)")
    p.add_argument("--tick", action="store_true", help="run one tick and exit (for cron or an agent's /loop)")
    p.add_argument("--ticks", type=whole(1, what="a number of ticks"), default=None,
                   help="stop after this many ticks (1 or more)")
    p.add_argument("--wait-agents", type=seconds(0, 7 * 86400, "seconds to wait"), default=0.0,
                   help="seconds a tick waits for the agents it spawned, 0 to 604800 (demos with "
                        "fast agents)")
    p.add_argument("--no-live", action="store_true", help="plain lines instead of the live view")
    p.add_argument("--report", action="store_true", help="print the journey table when the loop ends")
    p.add_argument("--demo", action="store_true",
                   help="work in a fresh repository under runs/demo/<stamp> (a copy of this tree on its own "
                        "branch 'main', then a deliberately slow start and the demo's settings: "
                        "harness/demo.py), never on your branches; implies --report and writes "
                        "its journey.html")
    p.set_defaults(func=cmd_loop)



def duration(text: str) -> float:
    """``--every``'s value in seconds; argparse reports anything else (exit 2)."""
    import argparse

    from ..settings import DURATION_FORMS, parse_duration

    seconds = parse_duration(text)
    if seconds is None:
        raise argparse.ArgumentTypeError(f"expected a duration: {DURATION_FORMS}, found {text!r}")
    return seconds


def _ctx(args, progress=None):
    from gates.interpreter import prepare_interpreter

    prepare_interpreter()
    from .. import ledger as L
    from ..pipeline import Context
    from ..worktrees import Repo
    from .shared import _context

    v = _context(args)
    repo, settings, cuda = v.repo, v.settings, v.cuda
    led = L.Ledger(L.default_path(repo))
    ctx = Context(Repo(repo), v.cfg, v.runs, cuda, led,
                  progress=progress or (lambda m: print(f"… {m}", file=sys.stderr)),
                  settings_digest=settings.digest)
    if v.cfg.farm.kind == "ray":
        # judgments go to the Ray cluster of farm.address; a FarmError (Ray missing, the
        # cluster unreachable) stops the command before anything is recorded
        from ..farm import slots_for
        from ..ray_farm import RayFarm

        ctx.remote = RayFarm(ctx.repo.root, v.cfg.farm, cuda, slots_for(v.cfg.farm, cuda))
    else:
        ctx.slots()  # a farm.slots that does not fit this machine is refused now, not mid-judgment
    return ctx, settings


def judged_before(attempts, sha: str, again: bool) -> str | None:
    """Pure: why ``kern try`` refuses commit ``sha`` given the ledger's attempts of it
    (``attempts``, oldest first), or None: one is in flight (never two judgments of a commit at
    once), or one reached a verdict and ``--again`` was not given."""
    busy = [a for a in attempts if a.state in IN_FLIGHT]
    if busy:
        a = busy[-1]
        return (f"commit {sha[:12]} is being judged now as attempt #{a.number} ({a.state} since "
                f"{a.updated_at}): wait for it, or `kern cancel {a.number}` first")
    if attempts and not again:
        a = attempts[-1]
        return (f"commit {sha[:12]} was judged already: attempt #{a.number}, {a.state}"
                + (f" ({a.reason})" if a.reason else "")
                + f". `kern show {a.number}` shows it; `kern try {sha[:12]} --again` judges it "
                  f"again as a new attempt")
    return None


def check_try(args):
    """``kern try``'s refusals, before torch is imported or anything is written: (repository,
    commit) or :class:`InputError` (WORKTREE, a commit main already holds, a commit the ledger
    holds a verdict for, runs/ not writable)."""
    from gates.launch.checkout import WORKTREE, resolve

    from .. import ledger as L
    from ..gitcmd import git_or_none
    from .shared import InputError, repo_root, writable_runs

    repo = repo_root(args)
    sha = resolve(repo, args.rev)  # a name that is no commit leaves no ledger behind
    if sha == WORKTREE:
        raise InputError("WORKTREE: expected a commit (kern try judges and merges commits): commit "
                         "your edits, then kern try HEAD")
    base = git_or_none(repo, "merge-base", "main", sha)
    if base is None and git_or_none(repo, "rev-parse", "--verify", "--quiet", "refs/heads/main") is None:
        raise InputError(f"{repo} has no branch 'main': kern try judges a commit against main and "
                         f"merges it there (create it, or try `kern loop --demo`)")
    if (base or "").strip() == sha:
        raise InputError(f"{args.rev} ({sha[:12]}) is already on main: there is no change to judge "
                         f"against it. Commit your change on a branch (git switch -c my-change; "
                         f"git commit -a), then kern try my-change")
    writable_runs(repo)
    path = L.default_path(repo)
    if path.exists():
        with L.Ledger(path, readonly=True) as led:
            why = judged_before(led.of_commit(sha), sha, args.again)
        if why:
            raise InputError(why)
    return repo, sha


def cmd_try(args) -> int:
    from ..pipeline import holding_stores, try_commit

    from ..ledger import INTERRUPTED, LedgerError

    from ..farm import FarmError

    _, sha = check_try(args)
    try:
        ctx, _ = _ctx(args)
    except FarmError as e:
        print(f"kern try: {e}", file=sys.stderr)
        return 2
    try:
        with holding_stores(ctx):  # its judgment's scorer runs lease one model store
            number, out = try_commit(ctx, args.rev, title=args.title, target=args.target)
    except LedgerError as e:  # a full disk: what was recorded stands; kern loop resumes the rest
        print(f"kern try: stopped: {e}", file=sys.stderr)
        return 4
    except (KeyboardInterrupt, SystemExit):  # the pipeline recorded the attempt as interrupted
        ended = [a for a in ctx.ledger.of_commit(sha) if a.state == INTERRUPTED]
        if ended:
            print(f"kern try: attempt #{ended[-1].number} interrupted: {ended[-1].reason}",
                  file=sys.stderr, flush=True)
        raise
    a = ctx.ledger.attempt(number)
    from ..journey import result

    print(f"attempt #{number}: {a.title}")
    if a.delta_ms is not None:
        print(f"score change {a.delta_ms:+.3f} ms [{a.ci_low:+.3f}, {a.ci_high:+.3f}]")
    if a.hidden:
        from gates.protocol import Hidden

        print(f"hidden     {Hidden.from_dict(a.hidden).describe()} (replay: kern test "
              f"{(a.commit_sha or '')[:12]} --vs {(a.base_sha or '')[:12]} --replay-attempt {number})")
    print(result(a))
    return 0 if out.state == "merged" else 1


def cmd_cancel(args) -> int:
    """``kern cancel N``: the shell around :func:`cancel_plan`."""
    from .. import ledger as L
    from ..pipeline import CANCEL_FILE
    from ..processes import agent_pid, alive, end_agent, end_judge, judge_alive, loop_holder
    from .report import _no_ledger
    from .shared import InputError, repo_root, writable_runs

    repo = repo_root(args)
    path = L.default_path(repo)
    if not path.exists():
        raise InputError(_no_ledger(args, path))
    runs = writable_runs(repo)
    n = args.number
    d = runs / "attempts" / str(n)
    with L.Ledger(path) as led:
        try:
            a = led.attempt(n)
        except L.LedgerError as e:
            raise InputError(f"{e}: `kern status` lists the attempts in flight") from None
        plan = cancel_plan(a, judge_alive(d), loop_holder(runs))
        if plan.refuse:
            raise InputError(plan.refuse)
        reason = f"cancelled: {args.reason}"
        if plan.signal_judge:
            d.mkdir(parents=True, exist_ok=True)
            (d / CANCEL_FILE).write_text(args.reason + "\n", encoding="utf-8")
            end_judge(d)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and led.attempt(n).state not in L.FINAL:
                time.sleep(0.2)
            after = led.attempt(n)
            if after.state not in L.FINAL:
                print(f"kern cancel: attempt #{n}'s kern try was asked to stop (SIGTERM) and has "
                      f"not recorded it within 60 s; `kern doctor` says whether it still runs",
                      file=sys.stderr)
                return 1
            print(f"attempt #{n}: {after.state}" + (f" ({after.reason})" if after.reason else ""))
            return 0
        if a.state == L.RUNNING:
            pid = agent_pid(d)
            if pid is not None and alive(pid):
                end_agent(pid)
        led.transition(n, L.INTERRUPTED, reason=reason)
    if a.state in (L.RUNNING, L.QUEUED, L.WAITING):
        from ..worktrees import Repo

        Repo(repo).close_attempt(n, runs)  # its worktree, if the loop made one
    print(f"attempt #{n}: interrupted ({reason}; it was {a.state})")
    return 0


@dataclass(frozen=True)
class CancelPlan:
    refuse: str | None = None  # why not (nothing changes)
    signal_judge: bool = False  # its kern try runs: ask it to stop; it records the attempt


def cancel_plan(a, judge_running: bool | None, loop: str | None) -> CancelPlan:
    """Pure: how ``kern cancel`` ends attempt ``a`` (its ledger row), given whether the kern try
    judging it runs (``judge_running``: None when none is recorded) and who holds the loop lock
    (``loop``: None when no loop runs). A final attempt has nothing to end; a kern try that
    runs ends it itself (it holds the judgment; the ledger has one writer per attempt); an
    attempt of a running loop is the loop's, which would judge or merge it regardless."""
    from .. import ledger as L

    if a.state in L.FINAL:
        return CancelPlan(refuse=f"attempt #{a.number} is already {a.state}"
                          + (f" ({a.reason})" if a.reason else "") + ": nothing to cancel")
    if judge_running:
        return CancelPlan(signal_judge=True)
    if loop is not None and judge_running is None and a.backend != "manual":
        return CancelPlan(refuse=f"attempt #{a.number} ({a.state}) belongs to the kern loop that "
                                 f"runs on this repository ({loop}): stop that loop first (Ctrl-C; "
                                 f"a later kern loop resumes), then kern cancel {a.number}")
    return CancelPlan()


def main_profile(runs: Path, sha: str) -> Path | None:
    """Pure over the file system's listing: the newest profile of main ``sha`` in ``runs/profile``
    (the loop's own first, then a ``kern profile``'s), or None."""
    folder = runs / "profile"
    if not folder.is_dir():
        return None
    loop = sorted(folder.glob(f"{sha[:12]}-loop-*.json"), key=lambda p: p.stat().st_mtime)
    by_hand = [p for p in (folder / f"{sha[:12]}.json",) if p.exists()]
    found = loop or by_hand
    return found[-1] if found else None


def cmd_brief(args) -> int:
    from .. import ledger as L
    from ..briefs import BriefError, ceiling_text, make_brief, measured_on_gpu, target_for
    from ..worktrees import Repo
    from .shared import repo_root, settings_of

    from .shared import out_file

    repo = repo_root(args)
    out_file(args.out, repo, mkdir=args.mkdir)
    settings = settings_of(args, repo)
    sha = Repo(repo).main_sha()
    path = Path(args.profile) if args.profile else main_profile(repo / "runs", sha)
    if path is None:
        print(f"kern brief: no profile of main {sha[:10]} in {repo / 'runs' / 'profile'}: run "
              f"'kern profile main' (on the GPU), or pass --profile FILE (a profile JSON)", file=sys.stderr)
        return 2
    try:
        measured = json.loads(path.read_text())
        prof = measured["profile"]
        prof["ops"], prof["step_ms"], prof["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"kern brief: {path}: expected a profile JSON (kern profile --out) with profile.ops, "
              f"step_ms and rows, found {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    led_path = L.default_path(repo)
    attempts = L.Ledger(led_path).attempts() if led_path.exists() else []
    number = max((a.number for a in attempts), default=0) + 1
    try:
        t = target_for(args.target, prof, attempts)
    except BriefError as e:
        print(f"kern brief: {e}", file=sys.stderr)
        return 2
    # the shapes and rules of the machine profile the profile was measured on
    brief = make_brief(settings.resolve(measured_on_gpu(measured)), t, prof, attempts, number, sha, ceiling=ceiling_text(measured))
    if args.out:
        Path(args.out).write_text(brief.text)
    if args.json:
        print(json.dumps({**brief.as_dict(), "profile": str(path)}, indent=1))
    else:
        print(brief.text)
        print(f"(profile: {path}; main {sha[:10]}; this would be attempt #{number})", file=sys.stderr)
    return 0


def cmd_loop(args) -> int:
    from ..processes import LoopLocked, acquire_loop_lock

    started = time.monotonic()

    def say(line: str, err: bool = False) -> None:
        """A line of the loop's log: it starts with the time, so a week of it reads against the clock."""
        print(stamped(line, datetime.now().astimezone()), file=sys.stderr if err else sys.stdout,
              flush=True)

    if args.demo:
        from ..demo import DemoError, make_repo

        try:
            args.repo = str(make_repo(Path(args.repo).resolve()))
        except DemoError as e:
            say(str(e), err=True)
            return 2
        args.report = True
        say(f"demo repository: {args.repo} (its second commit is the deliberately slow start: "
            f"harness/demo.py)")

    from ..settings import interval_problem
    from .shared import InputError, repo_root, settings_of, writable_runs

    # what needs no torch first: a bad --every or a held lock answers at once
    repo = repo_root(args)
    floor = settings_of(args, repo).resolve(False).loop.min_every_s  # kern.yaml checked here too
    if args.every is not None:
        bad = interval_problem(args.every, floor)
        if bad:
            raise InputError(f"--every: {bad}")
    try:
        lock = acquire_loop_lock(writable_runs(repo))
    except LoopLocked as e:
        say(str(e), err=True)
        return 3
    try:
        return _loop(args, say, started)
    finally:
        lock.close()


def _loop(args, say, started: float) -> int:
    """``kern loop`` once its lock is held: the context, the sandbox, resume, the ticks."""
    from ..farm import FarmError
    from ..ledger import LedgerError
    from ..orchestrator import Orchestrator
    from ..pipeline import close_stores

    lines = []  # (wall time, line): the live view reads the gate and stage from them
    view = None

    def progress(m):
        lines.append((time.time(), m))
        say(f"… {m}", err=True)
        if view is not None:
            view.refresh()

    try:
        ctx, settings = _ctx(args, progress=progress)
    except FarmError as e:
        say(f"kern loop: {e}", err=True)
        return 2
    from gates.launch import sandbox
    from gates.rules.confinement import SandboxUnavailable

    try:  # candidate code runs unattended for days: never unconfined unless kern.yaml says so
        confined = sandbox.chosen(ctx.cfg.sandbox)
    except SandboxUnavailable as e:
        print(f"kern loop: refusing to start: {e}", file=sys.stderr)
        return 2
    progress(f"sandbox: {sandbox.facts().describe(confined) if confined != 'off' else 'off (kern.yaml)'}")
    orch = Orchestrator(ctx)
    if ctx.cfg.agent.backend == "replay":
        from ..agents.common import AgentConfigError
        from ..agents.replay import queue_order

        try:
            queue_order(orch.replay_folder())
        except AgentConfigError as e:
            print(f"kern loop: refusing to start: {e}", file=sys.stderr)
            return 2
    ctx.stores = {}  # each slot's model store, kept across the loop's judgments (closed below)
    resumed = orch.resume()
    if resumed.requeued:
        say(f"resumed: re-queued attempts {resumed.requeued} left judging by a stopped loop")
    if resumed.stranded:
        say(f"resumed: attempts {resumed.stranded} never got their agent (the loop stopped "
            f"while starting them): recorded as crashed")
    if resumed.notes:
        say(f"resumed: restored the git notes of attempts {resumed.notes}")
    if resumed.interrupted:
        say(f"resumed: attempts {resumed.interrupted} were left judging by a kern try that is gone: "
            f"recorded as interrupted, not judged again (kern try REV --again does)")
    every = args.every if args.every is not None else ctx.cfg.loop.every_s
    ticks = 1 if args.tick else args.ticks
    n = 0
    live = None
    if not args.no_live and sys.stdout.isatty() and not args.tick:
        from rich.live import Live

        view = _LiveView(ctx, lines, started)
        live = Live(view, refresh_per_second=1)
        live.start()
    try:
        while True:
            last = ticks is not None and n + 1 >= ticks and not args.tick
            if view is not None:
                view.next_tick = None  # ticking now
            rep = orch.tick(wait_for_agents=args.wait_agents, spawn=not last)
            n += 1
            for num, state, reason in rep.collected:
                say(f"tick {n}: attempt #{num} {state}{': ' + str(reason) if reason else ''}")
            for num, target in rep.spawned:
                say(f"tick {n}: attempt #{num} spawned on {target}")
            if rep.draining:
                say(f"tick {n}: {rep.draining}: no attempt starts; the ones in flight finish first")
            if rep.stop:
                say(f"stopping: {rep.stop}")
                break
            more = ticks is None or n < ticks
            in_flight = len(ctx.ledger.attempts(states=IN_FLIGHT))
            say(f"tick {n}: {len(rep.collected)} collected, {len(rep.spawned)} started, {in_flight} in "
                f"flight" + (f"; next tick in {fmt_elapsed(every)}" if more else ""))
            if not more:
                orch.end(RUN_TICKS, "one tick (--tick)" if args.tick else f"{n} of --ticks {ticks}")
                break
            deadline = time.monotonic() + every
            if view is not None:
                view.next_tick = deadline
            while time.monotonic() < deadline:
                if view is not None:
                    view.refresh()
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    except LedgerError as e:
        # nothing more can be recorded (a full disk, a broken file); what was recorded stands
        say(f"kern loop: stopped: {e}", err=True)
        with contextlib.suppress(LedgerError):
            orch.end(RUN_HALTED, f"the ledger refused a write: {e}")
        return 4
    except (KeyboardInterrupt, SystemExit) as e:  # Ctrl-C, or SIGTERM (harness/cli/__init__.py)
        orch.end(RUN_INTERRUPTED, interruption(e))
        raise
    finally:
        close_stores(ctx)  # the loop's end, Ctrl-C, an error: no store outlives it
        if live:
            live.stop()
    if args.report:
        from ..journey import markdown

        print()
        print(markdown(ctx.ledger.attempts(), ctx.ledger.phases(), scores=ctx.ledger.scores()))
    if args.demo:
        from .report import page as journey_page

        page = Path(args.repo) / "journey.html"
        page.write_text(journey_page(Path(args.repo).resolve(), ctx.ledger), encoding="utf-8")
        say(f"journey    {page}  (kern --repo {args.repo} report --format html --out FILE writes it again)")
        say(f"demo took {time.monotonic() - started:.0f} s")
    return 4 if orch.halt else 0


def interruption(e: BaseException) -> str:
    """Pure: what ended a loop from outside, in words (the run's end in the ledger)."""
    code = getattr(e, "code", None)
    if isinstance(e, KeyboardInterrupt):
        return "Ctrl-C (SIGINT)"
    if isinstance(code, int) and code > 128 and code - 128 in signal.valid_signals():
        return f"{signal.Signals(code - 128).name} (exit {code})"
    return f"the process exited ({code})"


def stamped(line: str, now: datetime) -> str:
    """Pure: a log line of ``kern loop``, led by the time it was written (ISO 8601, seconds)."""
    return f"{now.isoformat(timespec='seconds')} {line}"


def live_caption(score: float | None, use: dict, budgets, hours: float, next_in: float | None,
                 judging: list[tuple]) -> list[str]:
    """Pure: the live view's lines under its table: main's score, what was spent against each
    budget (kern.yaml ``budgets``: attempts, tokens, cost, this loop's hours), the countdown to
    the next tick (None: a tick is running) and what is being judged (``live_rows`` rows of
    attempts judging) with the time spent in it."""
    out = [(f"main score: {score:.3f} ms" if score else "main score: not measured yet") + " · "
           + ("next tick in " + (fmt_elapsed(max(0.0, next_in)) or "0s") if next_in is not None
              else "tick running")]
    out.append(f"budgets: attempts {use['attempts']} / {budgets.attempts} · tokens {use['tokens']} / "
               f"{budgets.tokens} · cost ${use['cost_usd']:.2f} / ${budgets.cost_usd:.2f} · wall "
               f"{hours:.1f} / {budgets.wall_hours:g} h")
    for num, target, _, gate, elapsed, _ in judging:
        out.append(f"judging #{num} {target}: {gate}" + (f" for {elapsed}" if elapsed else ""))
    return out


class _LiveView:
    """The live view: the latest attempts with each one's gate and stage and the time spent in
    it; under them main's score, the countdown to the next tick, the budgets spent and what
    is being judged. ``refresh`` reads the ledger and git (the loop's thread: the gates'
    progress lines and the idle wait call it); rich's refresh thread only renders what it
    read, the elapsed times against its own clock."""

    def __init__(self, ctx, lines: list, started: float):
        self.ctx, self.lines, self.started = ctx, lines, started
        self.next_tick: float | None = None  # time.monotonic() of the next tick; None: ticking
        self.refresh()

    def refresh(self) -> None:
        led = self.ctx.ledger
        phase = led.current_phase_id()
        self.snapshot = (self.ctx.repo.main_sha()[:10], led.main_score(phase) if phase else None,
                         led.attempts()[-12:], led.usage())

    def __rich__(self):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        from ..journey import result
        from ..progress import live_rows, stage_of

        main, score, attempts, use = self.snapshot
        t = Table(title=f"kern loop · main {main}")
        for col in ("#", "target", "state", "gate · stage", "elapsed", "result"):
            t.add_column(col, overflow="fold")
        rows = live_rows(attempts, stage_of(list(self.lines)), time.time(), result)
        for row in rows:
            t.add_row(*row)
        now = time.monotonic()
        caption = live_caption(score, use, self.ctx.cfg.budgets, (now - self.started) / 3600,
                               None if self.next_tick is None else self.next_tick - now,
                               [r for r in rows if r[2] == "judging"])
        return Group(t, *(Text(line, no_wrap=True, overflow="ellipsis") for line in caption))


