"""The command backend: any CLI agent, given the brief on stdin, working in the worktree.

Settings (kern.yaml ``agent:``, harness/settings.py ``Agent``): ``command`` (a shell line,
run with ``sh -c`` in the worktree), ``timeout_s``, ``pass_env`` (names of variables the
command may see besides PATH, HOME and LANG, e.g. ``[ANTHROPIC_API_KEY]`` for a CLI that calls
the API; nothing else of the orchestrator's environment reaches it), ``max_budget_usd``
(exported as KERN_MAX_BUDGET_USD, for a command line such as ``claude -p --max-budget-usd
$KERN_MAX_BUDGET_USD``: the command backend cannot stop a CLI by itself). It also gets
KERN_ATTEMPT and KERN_TARGET, and GIT_AUTHOR_*/GIT_COMMITTER_* naming "kern-loop command". Its
stdout and stderr go to ``attempt-N.command.log`` beside the worktree.

Outcome: HEAD moved and the command finished in time -> "commit" (the orchestrator counts
the commits itself); HEAD unmoved and the last output line is the JSON
``{"declined": "the idea", "estimate_ms": -0.4}`` -> "declined"; otherwise "failed" with the
tail of its output. A command killed at its timeout is "failed" even if it had committed:
its work was cut off.

Claude Code in print mode with ``--output-format json`` (e.g. ``command: claude -p
--output-format json --allowedTools Read,Edit,Bash``) ends its output with one result object:
then the attempt's tokens and cost are the CLI's count (``modelUsage``, ``total_cost_usd``),
so the token budget sees them, and the declined line is looked for at the end of its
``result`` text. Any other command's tokens and cost are recorded as 0.
"""
from __future__ import annotations

from pathlib import Path

from ..settings import Agent
from .base import Brief, Proposal
from .common import (GitError, cli_result, cli_tokens, final_declined, head, identity,
                     minimal_env, run_limited, subject, transcript_path)


class CommandAgent:
    name = "command"

    def __init__(self, settings: Agent, *, transcript_dir=None):
        # kern.yaml's rules (harness/settings.py) hold: a non-empty command, a positive timeout
        self.command, self.timeout_s = settings.command, settings.timeout_s
        self.pass_env, self.max_budget_usd = list(settings.pass_env), settings.max_budget_usd
        self.transcript_dir = transcript_dir

    def propose(self, brief: Brief, worktree) -> Proposal:
        worktree = Path(worktree)
        before = head(worktree)
        log = transcript_path(worktree, brief.attempt, self.name, "log", self.transcript_dir)
        # identity: its commits name the backend, and git commits on an unconfigured machine
        budget = {} if self.max_budget_usd is None else {"KERN_MAX_BUDGET_USD": f"{self.max_budget_usd:g}"}
        env = minimal_env(self.pass_env, extra={"KERN_ATTEMPT": str(brief.attempt),
                                                "KERN_TARGET": brief.target, **budget,
                                                **identity(self.name)})
        ran = run_limited(self.command, cwd=worktree, env=env, timeout_s=self.timeout_s,
                          stdin_text=brief.text, log_path=log)
        result = None if ran.timed_out else cli_result(log)
        tally = {"transcript": str(log)}
        if result is not None:
            tokens_in, tokens_out = cli_tokens(result.get("modelUsage"), result.get("usage"))
            cost = result.get("total_cost_usd")
            tally.update(tokens_in=tokens_in, tokens_out=tokens_out,
                         cost_usd=float(cost) if isinstance(cost, (int, float))
                         and not isinstance(cost, bool) and cost >= 0 else 0.0)
        try:
            after = head(worktree)
        except GitError as e:
            return Proposal(kind="failed", reason=f"after the agent command, HEAD is unreadable: "
                                                  f"{e}", **tally)
        moved = after != before
        if ran.timed_out:
            return Proposal(kind="failed", timed_out=True,
                            reason=f"agent command timed out after {self.timeout_s:g}s "
                                   f"(agent.timeout_s){'; it had committed' if moved else ''}; "
                                   f"output tail:\n{ran.tail}", **tally)
        if moved:
            return Proposal(kind="commit", message=subject(worktree), **tally)
        last_words = result.get("result") if result is not None else None
        declined = final_declined(last_words if isinstance(last_words, str) else ran.tail)
        if declined:
            return Proposal(kind="declined", message=declined["declined"],
                            estimate_ms=declined["estimate_ms"], **tally)
        return Proposal(kind="failed",
                        reason=f"agent command exited {ran.returncode} without a commit (HEAD "
                               f"still {before[:12]}); output tail:\n{ran.tail}", **tally)
