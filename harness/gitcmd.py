"""git as a command, the one way the harness's shell runs it outside gitpython (the agents'
commits, kern show's and kern report's diffs, kern doctor's probes, kern try's checks, the Ray
farm's bundles). It decides nothing: a failure is a :class:`GitError` carrying git's own words,
and each caller says what that means for its user.

Every call passes ``commit.gpgsign=false`` and an empty hooks path: an unattended loop must
never wait on a signing prompt, and the gates, not a user's commit hooks, judge a candidate.
"""
from __future__ import annotations

import os
import subprocess


class GitError(RuntimeError):
    """A git command that failed: ``returncode`` None when git did not run (not installed,
    past its ``timeout``), and ``said``, git's own words (its stderr, else its stdout)."""

    def __init__(self, args: tuple, cwd, returncode: int | None, said: str):
        self.returncode, self.said = returncode, said
        how = "did not run" if returncode is None else f"exited {returncode}"
        super().__init__(f"`git {' '.join(map(str, args))}` in {cwd} {how}: {said[-2000:]}")


def git(cwd, *args: str, env: dict | None = None, input_text: str | None = None,
        timeout: float | None = None) -> str:
    """git's standard output of ``git ARGS`` run in ``cwd``, or :class:`GitError`. ``env``:
    the whole environment (None: this process's)."""
    cmd = ["git", "-c", "commit.gpgsign=false", "-c", f"core.hooksPath={os.devnull}", *args]
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, input=input_text, capture_output=True,
                           text=True, errors="replace", timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        raise GitError(args, cwd, None, str(e)) from None
    if r.returncode != 0:
        raise GitError(args, cwd, r.returncode, (r.stderr or r.stdout).strip())
    return r.stdout


def git_or_none(cwd, *args: str, timeout: float | None = None) -> str | None:
    """:func:`git`'s output, or None where it failed (for questions such as 'is this a
    commit here?', whose failure is the answer)."""
    try:
        return git(cwd, *args, timeout=timeout)
    except GitError:
        return None
