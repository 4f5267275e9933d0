"""The command backend: any CLI agent, given the brief on stdin, working in the worktree.

Settings (kern.yaml ``agent:``): ``command`` (a shell line, run with ``sh -c`` in the
worktree), ``timeout_s`` (default 3600), ``pass_env`` (names of variables the command may see
besides PATH, HOME and LANG, e.g. ``[ANTHROPIC_API_KEY]`` for a CLI that calls the API;
nothing else of the orchestrator's environment reaches it). It also gets KERN_ATTEMPT and
KERN_TARGET, and GIT_AUTHOR_*/GIT_COMMITTER_* naming "kern-loop command". Its stdout and stderr go to ``attempt-N.command.log`` beside the worktree.

Outcome: HEAD moved and the command finished in time -> "commit" (the orchestrator counts
the commits itself); HEAD unmoved and the last output line is the JSON
``{"declined": "the idea", "estimate_ms": -0.4}`` -> "declined"; otherwise "failed" with the
tail of its output. A command killed at its timeout is "failed" even if it had committed:
its work was cut off.
"""
from __future__ import annotations

from pathlib import Path

from .base import Brief, Proposal
from .common import (AgentConfigError, GitError, final_declined, head, identity, minimal_env,
                     run_limited, setting, subject, transcript_path)


class CommandAgent:
    name = "command"

    def __init__(self, settings: dict, *, transcript_dir=None):
        self.command = setting(settings, "command", str)
        if not self.command.strip():
            raise AgentConfigError("agent.command: expected a shell command line for the "
                                   "command backend, found ''")
        self.timeout_s = float(setting(settings, "timeout_s", (int, float), 3600))
        if self.timeout_s <= 0:
            raise AgentConfigError(f"agent.timeout_s: expected a positive number of seconds, "
                                   f"found {self.timeout_s}")
        self.pass_env = setting(settings, "pass_env", list, [])
        if not all(isinstance(x, str) for x in self.pass_env):
            raise AgentConfigError(f"agent.pass_env: expected a list of variable names, "
                                   f"found {self.pass_env!r}")
        self.transcript_dir = transcript_dir

    def propose(self, brief: Brief, worktree) -> Proposal:
        worktree = Path(worktree)
        before = head(worktree)
        log = transcript_path(worktree, brief.attempt, self.name, "log", self.transcript_dir)
        # identity: its commits name the backend, and git commits on an unconfigured machine
        env = minimal_env(self.pass_env, extra={"KERN_ATTEMPT": str(brief.attempt),
                                                "KERN_TARGET": brief.target,
                                                **identity(self.name)})
        ran = run_limited(self.command, cwd=worktree, env=env, timeout_s=self.timeout_s,
                          stdin_text=brief.text, log_path=log)
        try:
            after = head(worktree)
        except GitError as e:
            return Proposal(kind="failed", reason=f"after the agent command, HEAD is unreadable: "
                                                  f"{e}", transcript=str(log))
        moved = after != before
        if ran.timed_out:
            return Proposal(kind="failed", transcript=str(log), timed_out=True,
                            reason=f"agent command timed out after {self.timeout_s:g}s "
                                   f"(agent.timeout_s){'; it had committed' if moved else ''}; "
                                   f"output tail:\n{ran.tail}")
        if moved:
            return Proposal(kind="commit", message=subject(worktree), transcript=str(log))
        declined = final_declined(ran.tail)
        if declined:
            return Proposal(kind="declined", message=declined["declined"],
                            estimate_ms=declined["estimate_ms"], transcript=str(log))
        return Proposal(kind="failed", transcript=str(log),
                        reason=f"agent command exited {ran.returncode} without a commit (HEAD "
                               f"still {before[:12]}); output tail:\n{ran.tail}")
