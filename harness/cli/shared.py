"""What the verb modules of harness/cli/ share: the repository context of a verb that runs
kernels, kern.yaml with this run's ``--set``, the ``--gpus``/``--emulate`` flags with their
check, the ``--help`` examples and the error a user's input raises."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ..settings import Resolved, SettingsFile, load


def add_rank_flags(p, what: str, timed: bool = True) -> None:
    slowest = "; a replay's time is its slowest rank's" if timed else ""
    p.add_argument("--gpus", type=whole(1, 8, "a number of processes"), default=None,
                   help=f"run {what} as this many processes, one per rank (1, 2, 4, 8; gloo on "
                        f"the CPU, NCCL on GPUs): the model split TP/DCP/EP over them{slowest}")
    p.add_argument("--emulate", type=whole(1, 8, "a layout's rank count"), default=None,
                   help="with --gpus W: each process computes its rank's share of this larger "
                        "layout (8: the published TP8+DCP8 / EP2xTP4), collectives over the W "
                        "processes, so per-rank cost matches that deployment")


@dataclass(frozen=True)
class VerbContext:
    """What a verb that runs kernels works with: the repository, kern.yaml as loaded
    (``settings``: its digest goes into every result) and resolved for this machine (``cfg``:
    each gate is handed its section of it), whether CUDA is there, the runs folder."""
    repo: Path
    settings: SettingsFile
    cfg: Resolved
    cuda: bool
    runs: Path


# The largest count a flag takes (a C int: what torch's shapes and the sides' loops hold) and
# the largest attempt number (SQLite's INTEGER).
MAX_COUNT = 2**31 - 1
MAX_ATTEMPT = 2**63 - 1


def whole(lo: int, hi: int = MAX_COUNT, what: str = "a whole number"):
    """An argparse ``type``: a whole number from ``lo`` to ``hi``; anything else is argparse's
    one-line error (exit 2) saying what was expected."""
    import argparse

    def parse(text: str) -> int:
        try:
            v = int(text, 10)
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"expected {what} from {lo} to {hi}, found {text!r}")
        return v

    return parse


def seconds(lo: float, hi: float, what: str = "seconds"):
    """An argparse ``type``: a finite number of seconds from ``lo`` to ``hi``."""
    import argparse
    import math

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"expected {what} from {lo:g} to {hi:g}, found {text!r}")
        return v

    return parse


def rows_list(text: str) -> list[int]:
    """``--rows 16,128``: batch sizes, each a whole number from 1 up."""
    import argparse

    out = []
    for part in text.split(","):
        try:
            out.append(whole(1, MAX_COUNT, "batch sizes, each")(part.strip()))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected comma-separated batch sizes, each a whole "
                                             f"number from 1 to {MAX_COUNT}, found {text!r}") from None
    return out


def out_file(value: str | None, repo: Path, flag: str = "--out", mkdir: bool = False,
             suffixes: tuple[str, ...] = ()) -> Path | None:
    """Where ``flag`` (``--out FILE``) writes, checked before any work is done: a path that is
    not a folder or a device, with one of ``suffixes`` when given, whose folder exists, or is
    made inside ``repo`` (a folder outside it only with ``--mkdir``). :class:`InputError`
    says which. The folder is made here, so nothing later writes to a place it did not check."""
    if value is None:
        return None
    path = Path(value)
    if suffixes and path.suffix.lower() not in suffixes:
        raise InputError(f"{flag} {value}: expected a file name ending in {' or '.join(suffixes)} "
                         f"(the format follows the suffix), found "
                         f"{repr(path.suffix) if path.suffix else 'no suffix'}")
    if path.is_dir():
        raise InputError(f"{flag} {value}: expected a file to write, found a folder (name a file "
                         f"in it, e.g. {path / ('journey' + (suffixes[0] if suffixes else '.txt'))})")
    if path.exists() and not path.is_file():
        raise InputError(f"{flag} {value}: expected a regular file to write, found a device or "
                         f"other special file")
    absolute = path.resolve()
    if path.exists() and (absolute.is_relative_to(Path("/proc")) or absolute.is_relative_to(Path("/sys"))):
        raise InputError(f"{flag} {value}: expected a file to write, found a file of the kernel's "
                         f"{absolute.parts[1]} (it takes no report)")
    folder = absolute.parent
    if not folder.exists():
        inside = folder.is_relative_to(repo.resolve())
        if not (inside or mkdir):
            raise InputError(f"{flag} {value}: the folder {folder} does not exist; kern makes "
                             f"folders only inside the repository ({repo.resolve()}) unless "
                             f"--mkdir is given")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"{flag} {value}: cannot make the folder {folder}: {e.strerror}") from None
    elif not folder.is_dir():
        raise InputError(f"{flag} {value}: {folder} is a file, not a folder")
    return path


def add_mkdir_flag(p) -> None:
    p.add_argument("--mkdir", action="store_true",
                   help="make --out's folder when it lies outside the repository (inside it, "
                        "missing folders are always made)")


class InputError(ValueError):
    """What the user named (a repository, a revision, a flag's value) is not usable; nothing
    was changed. harness/cli/__init__.py prints it on one line and exits 2."""


def repo_root(args) -> Path:
    """``--repo`` resolved, checked to be a git repository's root (:class:`InputError`)."""
    import git

    repo = Path(args.repo).resolve()
    try:
        git.Repo(repo)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise InputError(f"{repo} is not a git repository: run kern in a clone of the repository "
                         f"or pass --repo DIR") from None
    return repo


class HelpFormat(argparse.HelpFormatter):
    """argparse's help, wrapped as usual, but an epilog that starts with ``examples:`` keeps
    its lines as written (one command a line)."""

    def _fill_text(self, text, width, indent):
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def examples(*lines: str) -> dict:
    """``add_parser`` keywords for a verb's ``--help``: its examples (each ``command  # what``)
    as the epilog, in :class:`HelpFormat`."""
    return {"epilog": "examples:\n" + "\n".join(f"  {ln}" for ln in lines), "formatter_class": HelpFormat}


def settings_of(args, repo: Path) -> SettingsFile:
    """kern.yaml (``--config``, relative to ``repo``) with this run's ``--set`` overrides."""
    cfg = Path(args.config)
    return load(cfg if cfg.is_absolute() else repo / cfg, args.set)


def writable_runs(repo: Path) -> Path:
    """``repo/runs``, checked to be a folder this user can write (its ledger too, when there
    is one) before a verb that records anything starts; :class:`InputError` says what was
    found. A write is tried, not the mode bits read: a read-only mount refuses root too."""
    import os
    import tempfile

    runs = repo / "runs"
    ledger = runs / "ledger.sqlite"
    if runs.exists() and not runs.is_dir():
        raise InputError(f"{runs}: expected the folder kern records in, found a file (the user "
                         f"moves it away)")
    where = runs if runs.exists() else repo
    try:
        fd, probe = tempfile.mkstemp(prefix=".kern-write-", dir=where)
        os.close(fd)
        os.unlink(probe)
        if ledger.exists():
            with open(ledger, "r+b"):
                pass
    except OSError as e:
        bad = Path(e.filename) if e.filename else where
        try:
            st = (ledger if bad == ledger else where).stat()
            got = f"mode {st.st_mode & 0o777:04o}, owner uid {st.st_uid}"
        except OSError:
            got = "unreadable"
        what = ledger if bad == ledger else where
        raise InputError(f"{what} is not writable by this user (uid {os.getuid()}): "
                         f"{e.strerror}. Expected {'the ledger' if what == ledger else 'the folder'} "
                         f"writable (kern records every attempt under {runs}), got {got}. The user "
                         f"fixes it (chmod u+w, or run kern as the owner); `kern status`, `kern "
                         f"report` and `kern show` still read it") from None
    return runs


def _context(args) -> VerbContext:
    import torch

    repo = repo_root(args)  # before anything is read or written under it
    settings = settings_of(args, repo)
    cuda = torch.cuda.is_available()
    runs = repo / "runs"
    runs.mkdir(exist_ok=True)
    return VerbContext(repo, settings, settings.resolve(cuda), cuda, runs)


def rank_args(args, cuda: bool, verb: str, model: str | None = None) -> tuple[int, str | None] | None:
    """(processes, layout) from --gpus/--emulate; None after saying why they cannot run."""
    from gates.rules import ranks

    try:
        import torch

        return ranks.side_ranks(args.gpus, args.emulate, cuda,
                                       torch.cuda.device_count() if cuda else 0, model)
    except ranks.RanksError as e:
        print(f"kern {verb}: {e}", file=sys.stderr)
        return None
