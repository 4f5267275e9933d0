"""Git for the loop: attempt branches and worktrees, commit counting, rebases, fast-forward
merges and notes. A thin shell over gitpython; it decides nothing.

The loop works on a branch it owns (``kern.yaml``'s main branch, default ``main``); a demo or
test run points ``--repo`` at its own repository under ``runs/`` so a user's branches are
never rewritten.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import git

from gates.launch.checkout import worktrees_locked

NOTES_REF = "kern"


@dataclass(frozen=True)
class Commits:
    shas: list  # oldest first
    paths: list
    changed_lines: int


class Repo:
    def __init__(self, root: Path, main: str = "main"):
        self.root = Path(root).resolve()
        self.git = git.Repo(self.root)
        self.main = main

    def sha(self, rev: str) -> str:
        return self.git.git.rev_parse("--verify", f"{rev}^{{commit}}")

    def main_sha(self) -> str:
        return self.sha(self.main)

    def worktree_for(self, number: int, runs: Path) -> Path:
        return (runs / "worktrees" / f"attempt-{number}").resolve()

    def branch(self, number: int) -> str:
        return f"attempt/{number}"

    def open_attempt(self, number: int, base_sha: str, runs: Path) -> Path:
        """A fresh worktree on ``attempt/<n>`` at ``base_sha`` (replacing any leftover)."""
        path = self.worktree_for(number, runs)
        with worktrees_locked(self.root):
            self._close(number, runs, keep_branch=False)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.git.git.worktree("add", "-B", self.branch(number), str(path), base_sha)
        return path

    def close_attempt(self, number: int, runs: Path, keep_branch: bool = True) -> None:
        with worktrees_locked(self.root):
            self._close(number, runs, keep_branch)

    def _close(self, number: int, runs: Path, keep_branch: bool) -> None:
        path = self.worktree_for(number, runs)
        if path.exists():
            try:
                self.git.git.worktree("remove", "--force", str(path))
            except git.GitCommandError:
                shutil.rmtree(path, ignore_errors=True)
        self.git.git.worktree("prune")
        if not keep_branch:
            try:
                self.git.git.branch("-D", self.branch(number))
            except git.GitCommandError:
                pass

    def commits_since(self, base: str, tip: str) -> Commits:
        shas = self.git.git.rev_list("--reverse", f"{base}..{tip}").split()
        if not shas:
            return Commits([], [], 0)
        # --no-renames: a file moved out of a protected path must show its old path too
        paths = sorted(set(self.git.git.diff("--name-only", "--no-renames", base, tip).splitlines()))
        stat = self.git.git.diff("--numstat", "--no-renames", base, tip).splitlines()
        lines = 0
        for row in stat:
            a, b, *_ = row.split("\t")
            lines += (int(a) if a.isdigit() else 0) + (int(b) if b.isdigit() else 0)
        return Commits(shas, paths, lines)

    def blob(self, rev: str, path: str) -> bytes | None:
        """The bytes of ``path`` at ``rev`` (None where it does not exist there)."""
        try:
            return self.git.git.show(f"{rev}:{path}", stdout_as_string=False)
        except git.GitCommandError:
            return None

    def tip(self, number: int) -> str:
        return self.sha(self.branch(number))

    def rebase(self, number: int, onto: str, runs: Path, tip: str | None = None) -> tuple[bool, str]:
        """Rebase the attempt's branch onto ``onto``; (ok, new tip or conflict text). ``tip``
        starts the branch when the attempt has none (``kern try`` judges any commit)."""
        wt = self.worktree_for(number, runs)
        g = git.Repo(wt).git if wt.exists() else None
        if g is None:
            if tip is not None and not self.git.git.branch("--list", self.branch(number)).strip():
                self.git.git.branch(self.branch(number), tip)
            path = self.open_attempt_at_tip(number, runs)
            g = git.Repo(path).git
        try:
            g.rebase(onto)
        except git.GitCommandError as e:
            try:
                g.rebase("--abort")
            except git.GitCommandError:
                pass
            return False, str(e).splitlines()[-1][:300]
        return True, g.rev_parse("HEAD")

    def open_attempt_at_tip(self, number: int, runs: Path) -> Path:
        path = self.worktree_for(number, runs)
        path.parent.mkdir(parents=True, exist_ok=True)
        with worktrees_locked(self.root):
            self.git.git.worktree("add", str(path), self.branch(number))
        return path

    def is_ancestor(self, sha: str, of: str) -> bool:
        """Whether commit ``sha`` is ``of`` or one of its ancestors."""
        try:
            self.git.git.merge_base("--is-ancestor", sha, of)
        except git.GitCommandError:
            return False
        return True

    def fast_forward_main(self, sha: str) -> bool:
        """Move main to ``sha`` iff that is a fast-forward; never rewrites main."""
        current = self.main_sha()
        if self.git.git.merge_base(current, sha) != current:
            return False
        if self.git.active_branch.name == self.main if not self.git.head.is_detached else False:
            self.git.git.merge("--ff-only", sha)
        else:
            self.git.git.update_ref(f"refs/heads/{self.main}", sha, current)
        return True

    def add_note(self, sha: str, text: str) -> None:
        self.git.git.notes("--ref", NOTES_REF, "add", "-f", "-m", text, sha)

    def noted(self) -> set[str]:
        """The commits that carry a kern note (one git call, however many there are)."""
        try:
            out = self.git.git.notes("--ref", NOTES_REF, "list")
        except git.GitCommandError:
            return set()
        return {line.split()[1] for line in out.splitlines() if len(line.split()) == 2}

    def note(self, sha: str) -> str | None:
        try:
            return self.git.git.notes("--ref", NOTES_REF, "show", sha)
        except git.GitCommandError:
            return None
