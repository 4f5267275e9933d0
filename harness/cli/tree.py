"""``kern ops``, ``kern step`` and ``kern profile``: the kernel tree as it is, no judgment (its
ops and where each one's kernel, reference, test and roofline live; its decode step run and
timed at every bucket; one step op by op). ``kern step`` and ``kern profile`` share one shell
(:func:`step_verb`) around a step side (gates/launch/step.py)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .shared import (_context, add_mkdir_flag, add_rank_flags, examples, out_file, rank_args,
                     repo_root, rows_list, whole)


def register(sub) -> None:
    """Add this module's verbs to ``kern``'s subparsers ``sub``."""
    p = sub.add_parser("ops", **examples(
            'kern ops                              every op with its kernel, reference, test and roofline',
            "kern ops --json | jq -r '.ops[].op'   the op names"),
        help="list every op: module, reference, kernel, test, roofline",
                       description="List every op of the kernel tree with where its kernel, "
                                   "protected reference, test and roofline formula live.")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_ops)

    p = sub.add_parser(
        "step", **examples(
            'kern step                             every bucket of the machine profile',
            'kern step HEAD --rows 16,128 --ref-rows 16  two batch sizes; the error at 16 rows'),
        help="build the model and time the decode step at every bucket",
        description="Build the seeded model for REV's tree, run the step at every bucket of the "
                    "profile (NaN checks, graph replays, peak memory), the per-op profile at "
                    "--profile-rows and the whole step's error against the reference ops at "
                    "--ref-rows. On the CPU: the small config through the interpreter (times are "
                    "mechanics only, not GPU scores).")
    p.add_argument("rev", nargs="?", default="WORKTREE", help="revision (default: the work tree)")
    p.add_argument("--rows", type=rows_list, default=None,
                   help="comma-separated batch sizes, each 1 or more (default: the profile's buckets)")
    p.add_argument("--context", type=whole(1, what="tokens"), default=None,
                   help="tokens in context per request")
    p.add_argument("--replays", type=whole(1, what="a number of replays"), default=20,
                   help="timed graph replays per batch size; the median is reported (default: 20)")
    p.add_argument("--profile-rows", type=whole(0, what="a batch size"), default=0, metavar="ROWS",
                   help="also time every op at this batch size (kern profile's table; 0: not)")
    p.add_argument("--ref-rows", type=whole(0, what="a batch size"), default=0, metavar="ROWS",
                   help="also run the whole step on the reference ops at this batch size and report "
                        "the logits' error against it (0: not)")
    p.add_argument("--state-dtype", default="bf16", choices=("bf16", "f32"),
                   help="KDA's recurrent state dtype (default: bf16, as published)")
    add_rank_flags(p, "the step")
    p.add_argument("--out", default=None, help="write the result JSON here")
    add_mkdir_flag(p)
    p.set_defaults(func=cmd_step)

    p = sub.add_parser(
        "profile", **examples(
            "kern profile                          the work tree's step, op by op",
            'kern profile HEAD --rows 128 --json   one commit at 128 rows, as JSON'),
        help="what is left in one step: time per op, roofline share, leave-one-out 'free' column",
        description="Time every op family in one step (device events around each op, attributed by "
                    "the op the dispatcher ran, i.e. the module that launched it), with each op's "
                    "roofline floor and a leave-one-out 'free' column (the step re-captured without "
                    "that op), printed like the published 'what is left in a 128-row step' table.")
    p.add_argument("rev", nargs="?", default="WORKTREE",
                   help="revision to profile (default: WORKTREE, the work tree with its edits)")
    p.add_argument("--rows", type=whole(1, what="a batch size"), default=None,
                   help="batch size, 1 or more (default 128 on a GPU)")
    p.add_argument("--no-free", action="store_true", help="skip the leave-one-out column")
    add_rank_flags(p, "the step (the table is rank 0's; each collective is a row of its own)")
    p.add_argument("--json", action="store_true", help="print the profile as one JSON object")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="write the step's result JSON here (default: runs/profile/<sha>.json)")
    add_mkdir_flag(p)
    p.set_defaults(func=cmd_profile)


def step_verb(args, verb: str, spec_for, out_for, limit_for):
    """The shell ``kern step`` and ``kern profile`` share: the context, the ``--gpus`` /
    ``--emulate`` check, the revision, then the verb's step side (gates/launch/step.py) with
    its progress on stderr and its result stamped with the commit and kern.yaml's hash.
    ``spec_for(v, world, layout)``, ``out_for(v, sha)``, ``limit_for(v.cfg)``: what the verb
    measures, where it writes, how long it may take. Returns ``(v, result, out)``, or an exit code
    after saying why there is none (2: the flags do not fit this machine; 1: the step failed)."""
    from gates.launch import checkout, compiled
    from gates.launch.step import run_step
    from gates.requests import Placement

    from ..worktrees import Repo

    out_file(args.out, repo_root(args), mkdir=args.mkdir)  # before the step runs, not after
    v = _context(args)
    sides = rank_args(args, v.cuda, verb, v.cfg.machine.model)
    if sides is None:
        return 2
    sha = checkout.resolve(v.repo, args.rev)
    out = out_for(v, sha)
    # its Triton cache starts as a copy of the revision's compiled kernels, else main's, where
    # a judgment made them (gates/launch/compiled.py); nothing is compiled for it
    seed = None
    for rev in (sha, Repo(v.repo).main):
        try:
            seed = seed or compiled.existing(v.repo, rev, v.runs, v.cfg.target, v.cfg.machine,
                                             v.cuda, sides[1], sides[0])
        except checkout.RevisionError:  # no main branch: the revision's own, or none
            pass
    res = run_step(v.repo, sha, v.runs, spec_for(v, *sides), out, limit_for(v.cfg),
                   Placement(sandbox=v.cfg.sandbox, seed=seed),
                   progress=lambda line, t: print(f"… {t:5.0f}s {line[:140]}", file=sys.stderr),
                   stamp={"commit": sha, "kern_yaml_sha256_16": v.settings.digest})
    if not res.ok:
        print(f"kern {verb}: the step ended with {res.kind}; log {res.log_path}:\n{res.log_tail[-1500:]}",
              file=sys.stderr)
        return 1
    return v, res.result, out


def op_table() -> list[dict]:
    import inspect

    from kernels.k31 import contracts

    rows = []
    for spec in contracts.OPS.values():
        try:
            doc = (inspect.getdoc(spec.load_roofline()) or "").strip()
            formula = " ".join(doc.split()) if doc else "(formula undocumented)"
        except (ImportError, AttributeError) as e:
            formula = f"(missing: {e})"
        rows.append({
            "op": spec.name, "family": spec.family, "summary": spec.summary,
            "kernel": spec.kernel, "reference": f"{spec.reference.__module__}:{spec.reference.__name__}",
            "test": spec.test, "roofline": spec.roofline, "formula": formula,
            "inputs": list(spec.inputs), "outputs": list(spec.outputs), "state": list(spec.state),
        })
    return rows


def cmd_ops(args) -> int:
    rows = op_table()
    if args.json:
        json.dump({"ops": rows}, sys.stdout, indent=1)
        print()
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{len(rows)} ops of kernels/k31", show_lines=False)
    for col in ("op", "kernel", "reference", "test", "roofline formula"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r["op"], r["kernel"], r["reference"], r["test"], r["formula"])
    Console(width=200).print(t)
    return 0


def cmd_step(args) -> int:
    import time

    from gates.spec import side_spec

    def spec_for(v, world, layout):
        m = v.cfg.machine
        rows = list(args.rows) if args.rows else list(m.buckets)
        spec = side_spec(v.cfg.target, m, context=args.context or m.context, steps=1,
                         rows=rows, replays=args.replays, profile_rows=args.profile_rows,
                         ref_rows=args.ref_rows, state_dtype=args.state_dtype)
        return spec if layout is None else {**spec, "layout": layout, "world": world}

    def out_for(v, sha):
        return Path(args.out) if args.out else v.runs / "step" / f"{sha[:12]}-{int(time.time())}.json"

    ran = step_verb(args, "step", spec_for, out_for, lambda cfg: cfg.step.timeout_s)
    if isinstance(ran, int):
        return ran
    v, r, out = ran
    cuda = v.cuda
    note = "" if cuda else "  (CPU interpreter: mechanics only, not a GPU time)"
    if "ranks" in r:
        rk = r["ranks"]
        print(f"ranks {rk['world']} ({rk['backend']}), layout {rk['layout']}: {rk['note']}; "
              f"a bucket's time is the slowest rank's")
    for b, e in r["buckets"].items():
        extra = ""
        if "ranks_agree" in e:
            extra = (f"  slowest rank {e['slowest_rank']}  ranks agree "
                     f"{'yes' if e['ranks_agree'] else 'NO'}")
        print(f"rows {int(b):4d}  median {e['median_ms']:9.3f} ms  NaN/Inf {e['nan_or_inf_logits']}  "
              f"experts touched/layer {e['routing']['touched_mean']:.0f}{extra}{note}")
    if "reference_error" in r:
        re_ = r["reference_error"]
        print(f"reference  rows {re_['rows']}: logits rel RMS {re_['logits_rel_rms']:.3g}, KL max "
              f"{re_['kl_max']:.3g}, argmax agreement {re_['argmax_agreement']:.3f}")
    print(f"wrote {out}")
    disagree = [b for b, e in r["buckets"].items() if e.get("ranks_agree") is False]
    if disagree:
        print(f"kern step: the ranks ended with different replicated bytes at rows "
              f"{', '.join(disagree)}: a collective is not deterministic across ranks",
              file=sys.stderr)
        return 1
    return 0


def cmd_profile(args) -> int:
    from gates.spec import side_spec

    def spec_for(v, world, layout):
        rows = args.rows or (128 if v.cuda else max(v.cfg.machine.buckets))
        return side_spec(v.cfg.target, v.cfg.machine, steps=1, rows=[rows], replays=10 if v.cuda else 1,
                         profile_rows=rows, free=not args.no_free,
                         layout=layout or v.cfg.machine.layout, world=world)

    def out_for(v, sha):
        return Path(args.out) if args.out else \
            v.runs / "profile" / f"{sha[:12] if sha != 'WORKTREE' else 'worktree'}.json"

    ran = step_verb(args, "profile", spec_for, out_for, lambda cfg: cfg.profile.timeout_s)
    if isinstance(ran, int):
        return ran
    v, result, _ = ran
    if args.json:
        print(json.dumps(result["profile"], default=str))
        return 0
    for line in profile_lines(result, v.cuda):
        print(line)
    return 0


def profile_lines(result: dict, cuda: bool) -> list[str]:
    p = result["profile"]
    bw = result.get("read_ceiling_Bps")
    lines = [f"What is left in a {p['rows']}-row step ({p['step_ms']:.3f} ms, one CUDA graph)"
             if cuda else f"What is left in a {p['rows']}-row step (CPU interpreter: mechanics only, "
                          f"not GPU times)"]
    if bw:
        ts = result.get("torch_sum_Bps")
        lines.append(f"read ceiling measured at the start: {bw / 1e12:.2f} TB/s (best streaming read; "
                     f"floors divide by it)" + (f", torch's sum {ts / 1e12:.2f} TB/s" if ts else ""))
    rk = result.get("ranks")
    if rk:
        lines.append(f"rank 0 of {rk['world']} processes ({rk['backend']}), layout {rk['layout']}: "
                     f"{rk['note']}; collectives are rows of their own (events include the wait "
                     f"for the slowest peer)")
    lines.append(f"{'op':34s} {'ms':>9s} {'calls':>6s} {'floor ms':>9s} {'% floor':>8s} {'free ms':>8s}  module")
    total = 0.0
    for name, r in p["ops"].items():
        total += r["ms"]
        floor = f"{r['floor_ms']:.3f}" if r.get("floor_ms") is not None else "-"
        pct = f"{r['pct_of_floor']:.0f}" if r.get("pct_of_floor") else "-"
        free = f"{r['free_ms']:.3f}" if r.get("free_ms") is not None else "-"
        mods = ", ".join(m.replace("kernels.k31.", "") for m in r["modules"])
        lines.append(f"{name:34s} {r['ms']:9.3f} {r['calls']:6d} {floor:>9s} {pct:>8s} {free:>8s}  {mods}")
    lines.append(f"{'sum of per-op events':34s} {total:9.3f}   (per-call events inflate small ops; see free)")
    return lines
