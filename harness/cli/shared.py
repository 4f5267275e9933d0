"""What the verb modules of harness/cli/ share: the repository context of a verb that runs
kernels, kern.yaml with this run's ``--set``, the ``--gpus``/``--emulate`` flags with their
check, the ``--help`` examples and the error a user's input raises."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ..settings import Resolved, Settings, load


def add_rank_flags(p, what: str, timed: bool = True) -> None:
    slowest = "; a replay's time is its slowest rank's" if timed else ""
    p.add_argument("--gpus", type=int, default=None,
                   help=f"run {what} as this many processes, one per rank (1, 2, 4, 8; gloo on "
                        f"the CPU, NCCL on GPUs): the model split TP/DCP/EP over them{slowest}")
    p.add_argument("--emulate", type=int, default=None,
                   help="with --gpus W: each process computes its rank's share of this larger "
                        "layout (8: the published TP8+DCP8 / EP2xTP4), collectives over the W "
                        "processes, so per-rank cost matches that deployment")


@dataclass(frozen=True)
class VerbContext:
    """What a verb that runs kernels works with: the repository, kern.yaml as loaded (its
    ``data`` and ``profile`` are what the gates take) and resolved for this machine (``cfg``:
    what the verb itself reads), whether CUDA is there, the runs folder."""
    repo: Path
    settings: Settings
    cfg: Resolved
    profile: dict
    cuda: bool
    runs: Path


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


def settings_of(args, repo: Path) -> Settings:
    """kern.yaml (``--config``, relative to ``repo``) with this run's ``--set`` overrides."""
    cfg = Path(args.config)
    return load(cfg if cfg.is_absolute() else repo / cfg, args.set)


def _context(args) -> VerbContext:
    import torch

    repo = repo_root(args)  # before anything is read or written under it
    settings = settings_of(args, repo)
    cuda = torch.cuda.is_available()
    runs = repo / "runs"
    runs.mkdir(exist_ok=True)
    return VerbContext(repo, settings, settings.resolve(cuda), settings.profile(cuda), cuda, runs)


def rank_args(args, cuda: bool, verb: str, model: str | None = None) -> tuple[int, str | None] | None:
    """(processes, layout) from --gpus/--emulate; None after saying why they cannot run."""
    from gates import launch_ranks

    try:
        import torch

        return launch_ranks.side_ranks(args.gpus, args.emulate, cuda,
                                       torch.cuda.device_count() if cuda else 0, model)
    except launch_ranks.RanksError as e:
        print(f"kern {verb}: {e}", file=sys.stderr)
        return None
