"""``kern``: one verb per job. Each verb module registers its own verbs (a ``register(sub)``
that adds its subparsers, their help and the function that runs each); this file only lists
those modules, parses arguments and maps errors to exit codes with a sentence that says who
acts. A new verb touches its module and, for a new module, :data:`VERB_MODULES`."""
from __future__ import annotations

import argparse
import sys

from gates.sandbox import SandboxUnavailable

from . import commands, doctor, loop_cmd, report_cmd
from .settings import SettingsError

# the modules whose register(sub) adds verbs, in the order `kern --help` lists their verbs
VERB_MODULES = (commands, report_cmd, loop_cmd, doctor)

EPILOG = """CPU mode (no GPU): the small config runs through Triton's interpreter so the mechanics are
testable; CPU times are never GPU scores."""


# each module's register, taken once when this module is imported
REGISTRATIONS = tuple(m.register for m in VERB_MODULES)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kern", description="kern-loop: optimize the K3.1 decode kernels, prove every change.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="kern.yaml", help="settings file (default: kern.yaml)")
    p.add_argument("--repo", default=".", help="the git repository holding the tree (default: .)")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    for register in REGISTRATIONS:
        register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    import signal

    def terminate(signum, frame):  # a killed kern must take its side processes with it
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    if not args.verb:
        top.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SettingsError as e:
        print(f"kern: configuration error (edit {args.config}):\n{e}", file=sys.stderr)
        return 2
    except SandboxUnavailable as e:  # no side may start unconfined unless kern.yaml says so
        print(f"kern {args.verb}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kern: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
