"""Worktrees made and removed at once from many threads and runs folders: none is lost.

The gates check out main and candidates under each runs folder while the loop opens and
closes attempt worktrees; git's prune beside an add used to delete the new worktree's record
(CI, 2026-12-07: five adversarial fixtures failed "could not open .git/worktrees/<x>/gitdir").
"""
from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from gates.launch import checkout
from harness.worktrees import Repo

ROUNDS = 16  # enough that the race showed in every run before the lock (4 of 4)


def one_commit_repo(root: Path) -> str:
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    (root / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(root), "add", "a.txt"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "a"],
                   check=True)
    return Repo(root).main_sha()


def test_checkouts_and_attempt_worktrees_at_once_all_succeed_and_hold_their_tree(tmp_path):
    sha = one_commit_repo(tmp_path)
    failures: list[str] = []
    trees: list[Path] = []

    def gates(i: int) -> None:  # each judgment its own runs folder, all of one commit
        for k in range(ROUNDS):
            try:
                trees.append(checkout.checkout(tmp_path, sha, tmp_path / f"runs-{i}-{k}"))
            except Exception as e:  # noqa: BLE001 - every failure is collected, then asserted
                failures.append(f"checkout: {e}")

    def loop(i: int) -> None:  # attempts opened and closed (each close prunes)
        repo = Repo(tmp_path)
        for k in range(ROUNDS):
            try:
                repo.open_attempt(100 * i + k, sha, tmp_path / "runs")
                repo.close_attempt(100 * i + k, tmp_path / "runs")
            except Exception as e:  # noqa: BLE001
                failures.append(f"attempt: {e}")

    threads = [threading.Thread(target=f, args=(i,)) for i in range(4) for f in (gates, loop)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(trees) == 4 * ROUNDS and all((t / "a.txt").read_text() == "a\n" for t in trees)
    listed = subprocess.run(["git", "-C", str(tmp_path), "worktree", "list", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert all(f"worktree {t}" in listed for t in trees)  # each still registered with git
