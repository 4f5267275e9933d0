"""``kern``: one verb per job, one module per family of verbs (tree: ops, step, profile; judge:
test, bench; report: report, status; show; loop: try, brief, loop; doctor). Each registers its
own verbs (a ``register(sub)`` that adds its subparsers, their help and the function that runs
each); this file only lists those modules, parses arguments and maps errors to exit codes with
a sentence that says who acts: it is the one place where what a user can cause (a bad path, a
closed pipe, a ledger that cannot be read) becomes a message and exit 2 instead of a traceback. A new verb touches its module and, for a new module,
:data:`VERB_MODULES`. ``python -m harness.cli`` runs :func:`main` (``__main__.py``)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gates.rules.confinement import SandboxUnavailable
from gates.rules.footprint import DiskShort

from . import doctor, judge, loop, report, show, tree, usage
from ..settings import SettingsError
from .shared import InputError

# the modules whose register(sub) adds verbs, in the order `kern --help` lists their verbs
VERB_MODULES = (tree, judge, report, show, loop, doctor, usage)

EPILOG = """examples:
  kern doctor                           is this machine ready for a long run?
  kern try HEAD                         judge one commit (all gates), merge it if it wins
  kern loop --every 20m                 the loop: agents propose, the gates judge, winners merge
  kern loop --set budgets.cost_usd=20   kern.yaml with one key changed, for this run only
  kern status                           budgets spent, attempts in flight, main's score, why it stopped
  kern show 12                          one attempt whole
  kern help VERB                        each verb's flags and examples (or kern VERB --help)

CPU mode (no GPU): the small config runs through Triton's interpreter so the mechanics are
testable; CPU times are never GPU scores."""


# each module's register, taken once when this module is imported
REGISTRATIONS = tuple(m.register for m in VERB_MODULES)


def version() -> str:
    """kern-loop's installed version (pyproject.toml's, as pip installed it)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("kern-loop")
    except PackageNotFoundError:
        return "(not installed: pip install -e .)"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kern", description="kern-loop: optimize the K3.1 decode kernels, prove every change.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"kern {version()}",
                   help="print kern-loop's version and exit")
    p.add_argument("--config", default="kern.yaml", help="settings file (default: kern.yaml)")
    p.add_argument("--repo", default=".", help="the git repository holding the tree (default: .)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a kern.yaml key for this run only (repeatable; VALUE is YAML), "
                        "e.g. --set loop.every=1h --set budgets.cost_usd=20; the file is not edited")
    p.set_defaults(top_parser=p)  # for kern help, which prints it
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    for register in REGISTRATIONS:
        register(sub)
    for verb in sub.choices.values():  # --set after the verb too: kern loop --set loop.every=1h
        verb.add_argument("--set", dest="verb_set", action="append", default=[], metavar="KEY=VALUE",
                          help="override a kern.yaml key for this run only (repeatable; VALUE is "
                               "YAML), e.g. --set budgets.cost_usd=20; the file is not edited")
    return p


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    args.set = [*args.set, *getattr(args, "verb_set", [])]
    import signal

    def terminate(signum, frame):  # a killed kern must take its side processes with it
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    if not args.verb:
        top.print_help()
        return 2
    if not Path(args.repo).is_dir():
        print(f"kern: --repo {args.repo}: expected a directory (a clone of the repository), found "
              f"{'a file' if Path(args.repo).exists() else 'nothing'} there", file=sys.stderr)
        return 2
    from gates.launch.checkout import RevisionError

    from ..ledger import LedgerError

    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader that went away is found here, not at exit
        return code
    except SettingsError as e:
        fix = f"edit {args.config}" + (" or correct --set" if args.set else "")
        print(f"kern: configuration error ({fix}):\n{e}", file=sys.stderr)
        return 2
    except (InputError, RevisionError) as e:  # the user's input names nothing usable
        print(f"kern {args.verb}: {e}", file=sys.stderr)
        return 2
    except SandboxUnavailable as e:  # no side may start unconfined unless kern.yaml says so
        print(f"kern {args.verb}: {e}", file=sys.stderr)
        return 2
    except DiskShort as e:  # environment: the disk under runs/ has no room; no side started,
        print(f"kern {args.verb}: stopped: {e}", file=sys.stderr)  # or one ran out (recorded)
        return 4
    except LedgerError as e:  # the ledger cannot be read or written: the message says why
        print(f"kern {args.verb}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `kern show 1 --json | head`: the reader has what it wanted
        _quiet_stdout()
        return 141  # as git's, killed by SIGPIPE, reads in a shell
    except KeyboardInterrupt:
        print("kern: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        if e.filename is None:  # not a path the user named: a fault of its own, shown whole
            raise
        print(f"kern {args.verb}: {e.filename}: {e.strerror or e} (the user names a path this user "
              f"can use, or fixes its permissions)", file=sys.stderr)
        return 2


def _quiet_stdout() -> None:
    """Standard output to /dev/null: the interpreter's last flush at exit then has nowhere to
    fail (Python's documented answer to a closed pipe)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
