"""The one interface every agent backend implements, and the data it exchanges.

An agent gets a :class:`Brief` and a git worktree on branch ``attempt/<n>`` (checked out at
the main it was briefed on) and returns a :class:`Proposal`: exactly one commit on that branch,
or a declined idea with an estimate, or a failure. The orchestrator checks the branch itself
(commit count, paths) — a backend's word is never trusted for that.

Backends run in their own process (``python -m harness.agents.run``) so a hung or crashed
agent never takes the orchestrator down; only that process sees API keys. Gate subprocesses
get a minimal environment (``gates/sides.py``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
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
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    transcript: str = ""  # path of the transcript file, if any

    def as_dict(self) -> dict:
        return asdict(self)


class Agent(Protocol):
    name: str

    def propose(self, brief: Brief, worktree: Path) -> Proposal:
        """Work in ``worktree`` and return a proposal. May commit at most once."""
        ...
