"""``make_agent``: the backend kern.yaml's ``agent.backend`` names, built from its settings.

Context the orchestrator passes (keyword arguments; each backend takes the ones it uses and
ignores the rest, so the orchestrator may pass the same set to every backend):

- ``root``: the repository root (``agent.replay_dir`` is relative to it)
- ``tree``: kern.yaml ``target.tree`` (tuner)
- ``seed``: kern.yaml ``target.seed`` (tuner)
- ``index``: the replay patch to apply, its place in ``agent.replay_dir`` sorted (replay)
- ``transcript_dir``: where transcripts go (default: beside the worktree)
- ``api_key``, ``base_url``, ``client``: the Messages API (anthropic; tests)
"""
from __future__ import annotations

import importlib
import inspect

from ..settings import BACKENDS, Agent, SettingsError, agent_section
from .common import AgentConfigError

_CLASSES = {
    "anthropic": ("anthropic_agent", "AnthropicAgent"),
    "claude-code": ("claude_code", "ClaudeCodeAgent"),
    "command": ("command", "CommandAgent"),
    "tuner": ("tuner", "TunerAgent"),
    "replay": ("replay", "ReplayAgent"),
}
CONTEXT = ("root", "tree", "seed", "index", "transcript_dir", "api_key", "base_url", "client")
assert set(_CLASSES) == set(BACKENDS), "harness/settings.py BACKENDS and the registry disagree"


def agent_class(backend):
    if backend not in _CLASSES:
        raise AgentConfigError(f"agent.backend: expected one of {', '.join(BACKENDS)}, "
                               f"found {backend!r}")
    module, cls = _CLASSES[backend]
    # imported on demand: a backend's dependencies load only when it is the one in use
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)


def agent_settings(raw) -> Agent:
    """kern.yaml's ``agent:`` section from its mapping as the loop hands it to the agent process
    (JSON: ``Agent.options()``), read by the same rules as kern.yaml; :class:`AgentConfigError`
    names each problem."""
    if not isinstance(raw, dict):
        raise AgentConfigError(f"agent: expected a mapping of agent settings, found "
                               f"{type(raw).__name__}")
    try:
        return agent_section(raw)
    except SettingsError as e:
        raise AgentConfigError(str(e)) from None


def make_agent(settings: Agent, **ctx):
    """The agent for kern.yaml's ``agent:`` section (``Resolved.agent``; in the agent process,
    :func:`agent_settings` of what the loop handed it)."""
    if not isinstance(settings, Agent):
        raise AgentConfigError(f"agent: expected a mapping of agent settings, found "
                               f"{type(settings).__name__}")
    unknown = sorted(set(ctx) - set(CONTEXT))
    if unknown:
        raise AgentConfigError(f"make_agent: expected context among {', '.join(CONTEXT)}, "
                               f"found {', '.join(unknown)}")
    cls = agent_class(settings.backend)
    takes = inspect.signature(cls.__init__).parameters
    return cls(settings, **{k: v for k, v in ctx.items() if k in takes})
