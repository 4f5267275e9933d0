"""Revisions as directories: a detached git worktree per commit under ``runs/worktrees``.

A thin shell over git (no decisions). A worktree is made once per commit and reused; the
work tree itself (uncommitted edits) is the revision ``WORKTREE``.
"""
from __future__ import annotations

import fcntl
from contextlib import contextmanager
from pathlib import Path

import git

WORKTREE = "WORKTREE"


class RevisionError(ValueError):
    """A revision the user named does not exist or cannot be checked out."""


def resolve(repo: Path, rev: str) -> str:
    if rev == WORKTREE:
        return WORKTREE
    try:
        return git.Repo(repo).git.rev_parse("--verify", f"{rev}^{{commit}}")
    except git.GitCommandError:
        raise RevisionError(f"revision {rev!r} is not a commit of {repo}: name a branch, tag or "
                            f"commit SHA (git log --oneline lists them)") from None


@contextmanager
def worktrees_locked(repo: Path):
    """Every worktree add, remove and prune on ``repo`` one at a time, across threads,
    processes and runs folders (the lock lives in git's common folder): a prune beside an add
    deletes the new worktree's record before git has written it (CI, 2026-12-07: "could not
    open .git/worktrees/<x>/gitdir"). Not re-entrant: a holder calls nothing that takes it."""
    common = Path(git.Repo(repo).common_dir)
    with open(common / "kern-worktrees.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def checkout(repo: Path, sha: str, runs: Path) -> Path:
    """A directory holding ``sha``'s tree (``WORKTREE``: the repository itself)."""
    if sha == WORKTREE:
        return Path(repo).resolve()
    path = (runs / "worktrees" / sha[:12]).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    with worktrees_locked(repo):  # concurrent gates may ask for the same commit
        if (path / ".git").exists():
            return path
        r = git.Repo(repo)
        r.git.worktree("prune")
        r.git.worktree("add", "--detach", "--force", str(path), sha)
    return path


def changed_paths(repo: Path, base: str, rev: str) -> list[str]:
    r = git.Repo(repo)
    # --no-renames: a file moved out of a protected path shows its old path too
    if rev == WORKTREE:
        out = r.git.diff("--name-only", "--no-renames", base)
        untracked = r.untracked_files
        return sorted(set(out.splitlines()) | set(untracked))
    return sorted(set(r.git.diff("--name-only", "--no-renames", base, rev).splitlines()))


def blob(repo: Path, rev: str, path: str) -> str | None:
    """The text of ``path`` at ``rev`` (None where it does not exist)."""
    try:
        return git.Repo(repo).git.show(f"{rev}:{path}")
    except git.GitCommandError:
        return None
