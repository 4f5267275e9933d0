"""``kern test`` and ``kern bench``, the gates one at a time on a revision: their arguments
(:func:`register`, called by harness/cli/__init__.py), the hidden inputs they draw or replay,
their progress bars and the shells that run them."""
from __future__ import annotations

import json
import sys
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from gates.settings import MachineProfile

from ..settings import Resolved
from .shared import (MAX_ATTEMPT, _context, add_mkdir_flag, add_rank_flags, examples, out_file,
                     rank_args, repo_root, whole)


def register(sub) -> None:
    """Add this module's verbs to ``kern``'s subparsers ``sub``."""
    p = sub.add_parser(
        "test", **examples(
            'kern test HEAD                        your last commit against main',
            'kern test WORKTREE                    your uncommitted edits against main',
            'kern test HEAD --vs HEAD~1 --json     against another base, as one JSON object',
            "kern test 1a2b3c4 --replay-attempt 12 the commit on attempt 12's hidden inputs, again"),
        help="the accuracy gate: REV against BASE (bit-identity, cut-local, logits, reference)",
        description="Run REV (the candidate) against BASE (default main), each in its own "
                    "subprocess and worktree, over the seeded tap workload. Prints one fact per "
                    "line by section (diff, tap, local, logits, noise, reference); the last line "
                    "starts with the verdict. Exit 0 PASS, 1 FAIL, 2 INCONCLUSIVE; 4 when runs/ "
                    "lacks the disk space it writes (environment: disk; no side started).")
    p.add_argument("rev", help="the candidate: a git revision, or WORKTREE for uncommitted edits")
    p.add_argument("--vs", default="main", dest="base", help="the base revision (default: main)")
    add_rank_flags(p, "each side", timed=False)
    p.add_argument("--base-gpus", type=whole(1, 8, "a number of processes"), default=None,
                   help="run the base on this many processes with the model split over them "
                        "(1: the whole model in one), the candidate on --gpus: proves that the "
                        "split step computes the same model; op calls cannot be compared across "
                        "layouts, so the gathered logits are judged alone: KL within "
                        "test.layout_kl_pass, else within the band of the base with every op on "
                        "the reference")
    add_replay_flag(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.add_argument("--out", default=None, help="also write the full result JSON here")
    add_mkdir_flag(p)
    p.set_defaults(func=cmd_test)

    p = sub.add_parser(
        "bench", **examples(
            'kern bench                            the work tree alone: median per bucket, score',
            'kern bench HEAD --vs main             A/B: the change per bucket with its interval',
            "kern bench --baseline eager --out b.json  also the reference ops' step; write the JSON"),
        help="the scorer: median step time per bucket, weighted score; --vs BASE for A/B",
        description="Capture the decode step as one CUDA graph per bucket and time many replays "
                    "(inputs change and outputs are checked between replays, untimed). One line per "
                    "bucket (median, p10-p90, cv, % of the roofline floor), the score last. With "
                    "--vs BASE: interleaved A B B A rounds, per-bucket and score deltas with a "
                    "bootstrap interval, the A-vs-A noise band, faster/within noise/slower and the "
                    "guard. On the CPU the small config runs through the interpreter: mechanics only.")
    p.add_argument("rev", nargs="?", default="WORKTREE", help="revision to score (default: the work tree)")
    p.add_argument("--vs", default=None, dest="base", help="A/B against this base (e.g. main)")
    p.add_argument("--baseline", action="append", default=[], choices=("eager", "compile"),
                   help="also time the step on the reference ops (eager), or with each reference op "
                        "compiled by torch.compile (compile); printed as ratios to the tree's step")
    p.add_argument("--peers", action="store_true",
                   help="also time peer libraries at the same shapes (KDA decode vs fla-core)")
    p.add_argument("--alternate", action="store_true", default=None,
                   help="run the two sides one process at a time, alternating (automatic on a GPU "
                        "when their protected model code differs, so they cannot share one model)")
    p.add_argument("--rounds", type=whole(1, what="a number of rounds"), default=None,
                   help="A B B A rounds, 1 or more (default: kern.yaml)")
    p.add_argument("--replays", type=whole(1, what="a number of replays"), default=None,
                   help="timed replays per bucket per visit, 1 or more (default: kern.yaml)")
    add_rank_flags(p, "each side (its ranks alive together, the sides alternating)")
    add_replay_flag(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.add_argument("--out", default=None, metavar="FILE", help="also write the full result JSON here")
    add_mkdir_flag(p)
    p.set_defaults(func=cmd_bench)



def add_replay_flag(p) -> None:
    p.add_argument("--replay-attempt", type=whole(1, MAX_ATTEMPT, "an attempt number"), default=None,
                   metavar="N",
                   help="run with attempt N's hidden inputs (input seed, extra batch sizes) as the "
                        "ledger recorded them, to replay that judgment exactly; without it each "
                        "run draws its own and prints them after the verdict")


class ReplayError(ValueError):
    """The attempt named by --replay-attempt has no hidden inputs to replay (the user names
    another attempt)."""


def recorded_hidden(attempt, number: int, ledger_path, buckets, test_rows):
    """Pure: attempt ``number``'s recorded hidden inputs (``attempt``: its ledger row, None when
    absent), checked against this profile; :class:`ReplayError` says why there are none."""
    from gates.protocol import Hidden, HiddenError
    from gates.rules.hidden import misfit

    if attempt is None:
        raise ReplayError(f"--replay-attempt {number}: attempt #{number} is not in the ledger "
                          f"{ledger_path}; name an attempt that `kern status` or `kern report` lists")
    if attempt.hidden is None:
        why = f"{attempt.state}" + (f", {attempt.reason}" if attempt.reason else "")
        raise ReplayError(f"--replay-attempt {number}: attempt #{number} ({why}) has no hidden "
                          f"inputs recorded: no gate ran on it (scope, agent failure, still in "
                          f"flight), or it was judged before kern-loop recorded them; name an "
                          f"attempt the accuracy gate judged")
    try:
        h = Hidden.from_dict(attempt.hidden, f"attempt #{number}'s record in {ledger_path}")
    except HiddenError as e:
        raise ReplayError(f"--replay-attempt {number}: {e}; the ledger row was edited by hand") from None
    bad = misfit(h, buckets, test_rows)
    if bad:
        raise ReplayError(f"--replay-attempt {number}: attempt #{number}'s {bad}: it was judged on "
                          f"another profile; replay it on that machine or with that kern.yaml")
    return h


def hidden_inputs(args, repo, cfg: Resolved):
    """(the hidden inputs of this run, the attempt they are replayed from or None): a fresh
    draw, or ``--replay-attempt N``'s record (:class:`ReplayError` when it has none), for the
    machine profile and ``test.hidden_rows`` of ``cfg``."""
    from gates.rules import hidden

    from .. import ledger as L

    n = args.replay_attempt
    if n is None:
        return hidden.for_machine(cfg.machine, cfg.test), None
    path = L.default_path(repo)
    attempt = None
    if path.exists():  # opening a ledger creates one: a replay never does
        with L.Ledger(path) as led:
            try:
                attempt = led.attempt(n)
            except L.LedgerError:
                attempt = None
    return recorded_hidden(attempt, n, path, cfg.machine.buckets, cfg.machine.test_rows), n


def _progress(console):
    import time

    state = {"last": 0.0}

    def show(event) -> None:
        now = time.monotonic()
        if now - state["last"] >= 3.0:
            state["last"] = now
            console.print(f"[dim]… {str(event)[:150]}[/dim]", highlight=False)

    return show


@contextmanager
def gate_progress(console, bars, step, plain):
    """The ``progress`` callback for a gate, rendered by ``console``: on a terminal one rich bar
    per side (``bars``, moved by ``step(bars, event) -> (bars, moved)`` of harness/progress.py;
    an event that moves none is printed above them as its line), otherwise ``plain``, the
    events as they come. The bars end finished when the gate returns."""
    if not console.is_terminal:
        yield plain
        return
    from rich.progress import (BarColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn)

    from .. import progress as P

    prog = Progress(SpinnerColumn(), TextColumn("{task.description:<34}"), BarColumn(bar_width=24),
                    TextColumn("{task.fields[count]:>5}"), TimeElapsedColumn(),
                    TextColumn("[dim]{task.fields[detail]}[/dim]"), console=console,
                    refresh_per_second=4)
    state, ids = {"bars": tuple(bars)}, {}

    def sync():
        for b in state["bars"]:
            if b.key not in ids:
                ids[b.key] = prog.add_task(b.label, total=b.total, count="", detail="")
            total = b.total if b.total is not None else (1 if b.finished else None)
            done = b.done if b.total is not None else (1 if b.finished else 0)
            prog.update(ids[b.key], total=total, completed=done,
                        count=f"{b.done}/{b.total}" if b.total is not None else "",
                        detail=" ".join(b.detail.split())[:70])
            if b.finished and not prog.tasks[ids[b.key]].finished_time:
                prog.stop_task(ids[b.key])

    def show(event) -> None:
        state["bars"], moved = step(state["bars"], event)
        sync()
        if not moved:
            prog.console.print(f"[dim]… {str(event)[:150]}[/dim]", highlight=False)

    with prog:
        sync()
        try:
            yield show
        finally:
            state["bars"] = P.finish(state["bars"])
            sync()


def bench_plan(args, machine: MachineProfile) -> tuple[list, int]:
    """(the visit order, rounds) run_bench will follow for these flags (its own rule) on the
    machine profile ``machine``."""
    from gates.scorer import pattern

    rounds = args.rounds or machine.rounds
    return (pattern(rounds) if args.base else ["B"] * rounds), rounds


def emit(args, res, replayed, settings_digest: str, lines) -> None:
    """Print a gate's typed result (``lines(res, replayed)``: harness/terminal.py's, or one
    JSON object: its report) and write --out; every JSON carries the kern.yaml hash and the
    attempt whose hidden inputs it replayed (``replayed_from``)."""
    from pathlib import Path

    report = {**res.report, "replayed_from": replayed, "kern_yaml_sha256_16": settings_digest}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    if args.json:
        print(json.dumps(report, default=str))
        return
    for line in lines(res, replayed):
        print(line)
    if args.out:
        print(f"wrote      {args.out}")


@dataclass(frozen=True)
class GateInputs:
    """What ``kern test`` and ``kern bench`` both resolve before their gate runs: the context,
    the sides' ranks, the judgment's hidden inputs (drawn, or replayed from the ledger)."""
    v: object  # shared.py's VerbContext: repo, settings (the file), cfg (resolved), runs, cuda
    err: object  # rich Console on stderr
    sides: tuple
    hidden: object
    replayed: object


def gate_inputs(args, verb: str) -> "GateInputs | int":
    """The shared preamble of a gate verb; an exit code (2) when the user's flags cannot be
    served (the reason already printed, naming ``kern <verb>``)."""
    from rich.console import Console

    out_file(args.out, repo_root(args), mkdir=args.mkdir)  # before minutes of work, not after
    v = _context(args)
    err = Console(stderr=True)
    sides = rank_args(args, v.cuda, verb, v.cfg.machine.model)
    if sides is None:
        return 2
    try:
        hidden, replayed = hidden_inputs(args, v.repo, v.cfg)
    except ReplayError as e:
        print(f"kern {verb}: {e}", file=sys.stderr)  # one line, never wrapped
        return 2
    return GateInputs(v, err, sides, hidden, replayed)


def run_gate(args, verb: str, g: GateInputs, run, lines):
    """Run the gate (``run()`` returns its typed result) and print and write its report; None
    when a revision could not be checked out (the user's REV or BASE; printed)."""
    from gates.launch.checkout import RevisionError

    try:
        res = run()
    except RevisionError as e:
        print(f"kern {verb}: {e}", file=sys.stderr)
        return None
    emit(args, res, g.replayed, g.v.settings.digest, lines)
    return res


def cmd_test(args) -> int:
    from gates.accuracy import run_test
    from gates.rules import ranks

    from .. import progress as P
    from ..pipeline import accuracy_request
    from ..terminal import accuracy_report

    g = gate_inputs(args, "test")
    if isinstance(g, int):
        return g
    v, err = g.v, g.err
    try:
        base_world, base_layout = ranks.base_ranks(args.base_gpus, args.gpus, args.emulate,
                                                          v.cfg.machine.model)
    except ranks.RanksError as e:
        err.print(f"kern test: {e}")
        return 2

    def run():
        with (nullcontext() if args.json else gate_progress(err, (), P.test_step, _progress(err))) as show:
            world, layout = g.sides
            return run_test(accuracy_request(v.cfg, v.repo, args.rev, args.base, v.runs, v.cuda,
                                             world=world, layout=layout, base_world=base_world,
                                             base_layout=base_layout, hidden=g.hidden),
                            progress=show)

    res = run_gate(args, "test", g, run, accuracy_report)
    return 2 if res is None else res.exit_code


def cmd_bench(args) -> int:
    from gates.scorer import run_bench

    from .. import progress as P
    from ..pipeline import bench_request
    from ..terminal import scorer_report

    g = gate_inputs(args, "bench")
    if isinstance(g, int):
        return g
    v, err = g.v, g.err
    order, rounds = bench_plan(args, v.cfg.machine)

    def run():
        with gate_progress(err, P.bench_bars(order, rounds),
                           lambda bars, event: P.bench_step(bars, event, rounds),
                           lambda m: err.print(f"[dim]… {m}[/dim]", highlight=False)) as show:
            world, layout = g.sides
            return run_bench(bench_request(v.cfg, v.repo, args.rev, args.base, v.runs, v.cuda,
                                           baselines=tuple(args.baseline), rounds=args.rounds,
                                           replays=args.replays, peers=args.peers,
                                           alternate=args.alternate, world=world, layout=layout,
                                           hidden=g.hidden),
                             progress=show)

    res = run_gate(args, "bench", g, run, scorer_report)
    if res is None:
        return 2
    return 0 if res.outcome == "ok" else 1
