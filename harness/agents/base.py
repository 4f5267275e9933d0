"""The one interface every agent backend implements, and the data it exchanges.

An agent gets a :class:`Brief` and a git worktree on branch ``attempt/<n>`` (checked out at
the main it was briefed on) and returns a :class:`Proposal`: exactly one commit on that branch,
or a declined idea with an estimate, or a failure. The orchestrator checks the branch itself
(commit count, paths) — a backend's word is never trusted for that.

Backends run in their own process (``python -m harness.agents.run``) so a hung or crashed
agent never takes the orchestrator down; only that process sees API keys. Gate subprocesses
get a minimal environment (``gates/launch/process.py``).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Protocol


@dataclass
class Brief:
    attempt: int
    target: str  # op name or profile row, e.g. "moe.experts"
    text: str  # the rendered prompt (prompts/subagent.md with the fields below)
    share_pct: float | None = None  # the target's share of the step
    roofline_pct: float | None = None  # measured time as % of the floor
    shapes: str = ""  # the shapes that matter (rows, per-rank dims)
    tried: list = field(default_factory=list)  # earlier attempts on this target: one line each
    cycle_s: float | None = None  # how long judging one commit takes
    editable: list = field(default_factory=list)  # globs the agent may edit
    protected: list = field(default_factory=list)
    quick_test: str = ""  # shell command run in the worktree (fast correctness check)
    quick_bench: str = ""  # shell command run in the worktree (fast timing)
    base_sha: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Proposal:
    kind: str  # "commit" | "declined" | "failed"
    message: str = ""  # commit message, or the declined idea
    estimate_ms: float | None = None  # declined ideas: the estimated score change
    reason: str = ""  # failures: why
    timed_out: bool = False  # failures: the backend's own time limit ended the agent
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    transcript: str = ""  # path of the transcript file, if any

    def as_dict(self) -> dict:
        return asdict(self)


KINDS = ("commit", "declined", "failed")
_TYPES = {"kind": (str,), "message": (str,), "reason": (str,), "transcript": (str,),
          "estimate_ms": (int, float, type(None)), "timed_out": (bool,), "tokens_in": (int,), "tokens_out": (int,),
          "cost_usd": (int, float)}


class ProposalError(ValueError):
    """proposal.json is not a Proposal: the agent process wrote garbage or died mid-write."""


def parse_proposal(text: str) -> Proposal:
    """Pure: the text of proposal.json -> a Proposal, or :class:`ProposalError` saying what
    was expected and what was found. The agent process is untrusted: a wrong type here must
    become a recorded crash, never an exception inside the orchestrator's tick."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ProposalError(f"expected a JSON object, found {text[:60]!r} ({e})") from None
    if not isinstance(data, dict):
        raise ProposalError(f"expected a JSON object, found a JSON {type(data).__name__}")
    unknown = sorted(set(data) - {f.name for f in fields(Proposal)})
    if unknown:
        raise ProposalError(f"expected Proposal fields, found unknown {', '.join(unknown)}")
    if data.get("kind") not in KINDS:
        raise ProposalError(f"kind: expected one of {', '.join(KINDS)}, found {data.get('kind')!r}")
    for key, types in _TYPES.items():
        v = data.get(key)
        if key in data and ((isinstance(v, bool) and bool not in types) or not isinstance(v, types)):
            raise ProposalError(f"{key}: expected {' or '.join(t.__name__ for t in types)}, "
                                f"found {v!r}"[:200])
    for key in ("tokens_in", "tokens_out", "cost_usd"):
        if data.get(key, 0) < 0:
            raise ProposalError(f"{key}: expected a count >= 0, found {data[key]!r}")
    return Proposal(**data)


class AgentBackend(Protocol):
    """What every backend of ``harness/agents/`` is (kern.yaml's ``agent`` section chooses one:
    ``harness/settings.py``'s ``Agent``)."""

    name: str

    def propose(self, brief: Brief, worktree: Path) -> Proposal:
        """Work in ``worktree`` and return a proposal. May commit at most once."""
        ...
