"""What the verb modules share (``commands.py``, ``loop_cmd.py``): the repository context of a
verb that runs kernels, the ``--gpus``/``--emulate`` flags with their check, and the shell of
the verbs that run one step side (``kern step``, ``kern profile``)."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from .settings import Resolved, Settings, load


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
    was changed. harness/cli.py prints it on one line and exits 2."""


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


def step_verb(args, verb: str, spec_for, out_for, limit_for):
    """The shell ``kern step`` and ``kern profile`` share: the context, the ``--gpus`` /
    ``--emulate`` check, the revision, then the verb's step side (harness/step_launch.py) with
    its progress on stderr and its result stamped with the commit and kern.yaml's hash.
    ``spec_for(v, world, layout)``, ``out_for(v, sha)``, ``limit_for(v.cfg)``: what the verb
    measures, where it writes, how long it may take. Returns ``(v, result, out)``, or an exit code
    after saying why there is none (2: the flags do not fit this machine; 1: the step failed)."""
    from gates import checkout

    from .step_launch import run_step

    v = _context(args)
    sides = rank_args(args, v.cuda, verb, v.cfg.machine.model)
    if sides is None:
        return 2
    sha = checkout.resolve(v.repo, args.rev)
    out = out_for(v, sha)
    res = run_step(v.repo, sha, v.runs, spec_for(v, *sides), out, limit_for(v.cfg),
                   progress=lambda line, t: print(f"… {t:5.0f}s {line[:140]}", file=sys.stderr),
                   stamp={"commit": sha, "kern_yaml_sha256_16": v.settings.digest},
                   sandbox_mode=v.settings.data.get("sandbox"))
    if not res.ok:
        print(f"kern {verb}: the step ended with {res.kind}; log {res.log_path}:\n{res.log_tail[-1500:]}",
              file=sys.stderr)
        return 1
    return v, res.result, out
