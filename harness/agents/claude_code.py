"""The claude-code backend: a Claude Code session in the worktree (``claude-agent-sdk``).

The SDK is an optional dependency (``pip install 'kern-loop[agents]'``), imported only when an
attempt runs; without it the attempt fails with that instruction. Tools are Read, Edit, Write,
Glob, Grep and Bash with the worktree as cwd; no user, project or local Claude settings are
loaded (project settings can run hooks, and the worktree is agent-written). A PreToolUse hook
denies Edit/Write/MultiEdit/NotebookEdit outside the brief's editable globs or on a protected
path, by the same rule as the anthropic backend (:func:`harness.agents.rules.allowed_edit`).

Bash can still write anywhere the process can; the scope gate, which checks every commit's
paths, is what stops that, and the session is told so. The Claude Code process inherits this
process's environment (it needs the API key), so commands it runs see the key too; gate
subprocesses never do.

The session ends by committing once with git, or, when it declines, by ending its final
message with the JSON line ``{"declined": "the idea", "estimate_ms": -0.4}``. Outcome: HEAD
moved -> "commit"; that JSON -> "declined"; otherwise "failed". Settings (kern.yaml ``agent:``):
``model``, ``max_turns``, ``max_budget_usd`` (the CLI's own cap of the session's cost; null:
none). Tokens and cost are the CLI's own count of the
session's ResultMessage: every request it made (``model_usage``) and ``total_cost_usd``. The
transcript (one JSON object per SDK message) goes to ``attempt-N.claude-code.jsonl`` beside
the worktree.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path

from ..settings import Agent
from .base import Brief, Proposal
from .common import GitError, cli_tokens, final_declined, head, identity, subject, transcript_path
from .rules import edit_check

TOOLS = ["Read", "Edit", "Write", "Glob", "Grep", "Bash"]
EDIT_TOOLS = ("Edit", "Write", "MultiEdit", "NotebookEdit")
MISSING = "claude-agent-sdk not installed: pip install 'kern-loop[agents]'"
CLOSING = """

## How this session ends
Work only in the current directory (a git worktree on its own branch). Edit only files
matching {editable} and none of {protected}; edits elsewhere are denied, and the scope gate
rejects any commit that touches them, Bash included. When your change is ready, commit it
exactly once (`git add` the files you changed, then `git commit -m "..."`). If you decide not
to change anything, end your final message with one line of JSON:
{{"declined": "the idea", "estimate_ms": <estimated score change in ms, negative = faster>}}
"""


def edit_decision(tool_name: str, tool_input: dict, worktree, editable, protected) -> tuple[bool, str]:
    """May this tool call run? Only edit tools are judged; their path must be writable."""
    if tool_name not in EDIT_TOOLS:
        return True, f"{tool_name} is not an edit tool"
    path = (tool_input or {}).get("file_path") or (tool_input or {}).get("notebook_path")
    if not isinstance(path, str) or not path:
        return False, f"{tool_name}: expected file_path, found {path!r}"
    real, why = edit_check(worktree, path, editable, protected)
    return (True, f"{path} is editable") if real is not None else (False, why)


def make_hook(worktree, editable, protected):
    async def pre_tool_use(input_data, tool_use_id, context):
        ok, why = edit_decision(input_data.get("tool_name", ""), input_data.get("tool_input", {}),
                                worktree, editable, protected)
        if ok:
            return {}  # no opinion: the allowed_tools rule lets it run
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                       "permissionDecision": "deny",
                                       "permissionDecisionReason": f"refused: {why}"}}
    return pre_tool_use


def build_options(sdk, settings: Agent, brief: Brief, worktree) -> object:
    """The ``ClaudeAgentOptions`` of a session; ``sdk`` is the imported module (a stand-in in
    tests, where the SDK is not installed)."""
    matcher = {"matcher": "|".join(EDIT_TOOLS), "hooks": [make_hook(worktree, brief.editable,
                                                                     brief.protected)]}
    fields = {f.name for f in dataclasses.fields(sdk.HookMatcher)}
    if "on_failure" in fields:
        matcher["on_failure"] = "block"  # a hook that crashes must deny, not allow
    kwargs = dict(
        tools=list(TOOLS),
        allowed_tools=list(TOOLS),
        cwd=str(Path(worktree).absolute()),
        system_prompt={"type": "preset", "preset": "claude_code"},
        setting_sources=[],
        permission_mode="default",
        max_turns=settings.max_turns,
        model=settings.model,
        hooks={"PreToolUse": [sdk.HookMatcher(**matcher)]},
        env=identity("claude-code"),  # merged over this process's environment by the SDK
    )
    if settings.max_budget_usd is not None:
        kwargs["max_budget_usd"] = settings.max_budget_usd
    return sdk.ClaudeAgentOptions(**kwargs)


def prompt_for(brief: Brief) -> str:
    return brief.text + CLOSING.format(editable=brief.editable, protected=brief.protected)


def _jsonable(msg) -> dict:
    if dataclasses.is_dataclass(msg):
        return {"type": type(msg).__name__, **dataclasses.asdict(msg)}
    return {"type": type(msg).__name__, "repr": repr(msg)}


def tokens_of(res) -> tuple[int, int]:
    """(input tokens with cache writes and reads, output tokens) of a session's ResultMessage,
    counted as its cost is (:func:`harness.agents.common.cli_tokens`)."""
    if res is None:
        return 0, 0
    return cli_tokens(getattr(res, "model_usage", None), getattr(res, "usage", None))


class ClaudeCodeAgent:
    name = "claude-code"

    def __init__(self, settings: Agent, *, transcript_dir=None):
        self.settings, self.transcript_dir = settings, transcript_dir

    def propose(self, brief: Brief, worktree) -> Proposal:
        try:
            import claude_agent_sdk as sdk
        except ImportError:
            return Proposal(kind="failed", reason=MISSING)
        worktree = Path(worktree)
        before = head(worktree)
        path = transcript_path(worktree, brief.attempt, self.name, "jsonl", self.transcript_dir)
        options = build_options(sdk, self.settings, brief, worktree)
        result = {}

        async def session(log):
            async for msg in sdk.query(prompt=prompt_for(brief), options=options):
                log.write(json.dumps({"t": round(time.time(), 3), **_jsonable(msg)},
                                     default=str) + "\n")
                log.flush()
                if type(msg).__name__ == "ResultMessage":
                    result["msg"] = msg

        with open(path, "w", encoding="utf-8") as log:
            try:
                asyncio.run(session(log))
                error = None
            except Exception as e:  # the CLI failed to start or died: report, with the tally
                error = f"{type(e).__name__}: {e}"
        res = result.get("msg")
        tokens_in, tokens_out = tokens_of(res)
        tally = dict(tokens_in=tokens_in, tokens_out=tokens_out,
                     cost_usd=float(getattr(res, "total_cost_usd", 0) or 0), transcript=str(path))
        try:
            moved = head(worktree) != before
        except GitError as e:
            return Proposal(kind="failed", reason=f"after the session, HEAD is unreadable: {e}",
                            **tally)
        if moved:
            return Proposal(kind="commit", message=subject(worktree), **tally)
        text = getattr(res, "result", "") or ""
        declined = final_declined(text)
        if declined and error is None:
            return Proposal(kind="declined", message=declined["declined"],
                            estimate_ms=declined["estimate_ms"], **tally)
        why = error or (f"session ended ({getattr(res, 'subtype', 'no result')}) without a "
                        f"commit or a declined JSON line; last words: {text[-1500:]!r}")
        return Proposal(kind="failed", reason=why, **tally)
