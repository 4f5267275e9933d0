"""``kern``: one verb per job. Each verb's implementation lives in its own module; this file
only parses arguments and maps errors to exit codes with a sentence that says who acts."""
from __future__ import annotations

import argparse
import sys

from .settings import SettingsError

EPILOG = """verbs:
  ops      list every op of the kernel tree: module, reference, kernel, test, roofline
  step     build the model and run decode steps once; report time, routing and NaN checks
  test     the accuracy gate: REV against BASE (bit-identity, cut-local, logits, reference)
  bench    the scorer: median step time per bucket, weighted score; --vs BASE for A/B
  profile  time per op family in one step, roofline fraction, leave-one-out 'free' column
  try      all gates on one commit, then a ledger row (and a merge if it wins)
  loop     the orchestrator: ticks that plan, brief agents, judge and merge
  report   the journey table (Markdown, CSV, JSON, HTML)
  status   main's score, phase, attempts by state, budget used
  doctor   check this machine before a long run

CPU mode (no GPU): the small config runs through Triton's interpreter so the mechanics are
testable; CPU times are never GPU scores."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kern", description="kern-loop: optimize the K3.1 decode kernels, prove every change.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="kern.yaml", help="settings file (default: kern.yaml)")
    parser.add_argument("--repo", default=".", help="the git repository holding the tree (default: .)")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    from . import commands

    commands.register(sub)
    args = parser.parse_args(argv)
    import signal

    def terminate(signum, frame):  # a killed kern must take its side processes with it
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    if not args.verb:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SettingsError as e:
        print(f"kern: configuration error (edit {args.config}):\n{e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kern: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
