"""One attempt's agent in its own process: ``python -m harness.agents.run --brief BRIEF.json
--worktree DIR --settings SETTINGS.json --out PROPOSAL.json``.

BRIEF.json is ``Brief.as_dict()``. SETTINGS.json is ``{"agent": {...kern.yaml agent...},
"context": {...}}`` (context as in :mod:`harness.agents.registry`, optional); a bare agent
dict (one with a ``backend`` key) is accepted too. PROPOSAL.json gets ``Proposal.as_dict()``.

Whatever goes wrong (bad input, a backend exception, SIGTERM from the orchestrator's
timeout) becomes ``Proposal(kind="failed", reason=...)`` in PROPOSAL.json and exit status 0;
the traceback goes to stderr. Exit status 2 means PROPOSAL.json itself could not be written.
On SIGTERM the agent's own children (process groups it started) are ended first.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import traceback
from pathlib import Path

from .base import KINDS, Brief, Proposal
from .common import kill_live


class Terminated(Exception):
    pass


def load_brief(path) -> Brief:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object (Brief.as_dict()), found "
                         f"{type(data).__name__}")
    known = {f.name for f in dataclasses.fields(Brief)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{path}: expected Brief fields ({', '.join(sorted(known))}), found "
                         f"unknown {', '.join(unknown)}")
    return Brief(**data)


def load_settings(path) -> tuple[dict, dict]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict) and isinstance(data.get("agent"), dict):
        ctx = data.get("context") or {}
        if not isinstance(ctx, dict):
            raise ValueError(f"{path}: expected \"context\" to be an object, found {ctx!r}")
        return data["agent"], ctx
    if isinstance(data, dict) and "backend" in data:
        return data, {}
    raise ValueError(f"{path}: expected {{\"agent\": {{\"backend\": ...}}, \"context\": {{...}}}}, "
                     f"found {json.dumps(data)[:200]}")


def write_json(path, data: dict) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)  # the orchestrator never reads half a proposal


def attempt(brief_path, worktree, settings_path) -> Proposal:
    from .registry import agent_settings, make_agent

    backend = "agent"
    try:
        brief = load_brief(brief_path)
        raw, ctx = load_settings(settings_path)
        backend = raw.get("backend", backend)
        agent = make_agent(agent_settings(raw), **ctx)
        proposal = agent.propose(brief, Path(worktree))
        if not isinstance(proposal, Proposal) or proposal.kind not in KINDS:
            raise TypeError(f"{backend} returned {proposal!r}; expected a Proposal with kind "
                            f"in {KINDS}")
        return proposal
    except Exception as e:  # Terminated included: SIGTERM also ends as a failed proposal
        traceback.print_exc(file=sys.stderr)
        return Proposal(kind="failed", reason=f"{backend} backend raised {type(e).__name__}: {e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.agents.run",
                                 description="Run one attempt's agent; write its proposal JSON.")
    ap.add_argument("--brief", required=True)
    ap.add_argument("--worktree", required=True)
    ap.add_argument("--settings", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    def on_term(signum, frame):
        kill_live()
        raise Terminated(f"stopped by signal {signal.Signals(signum).name} (the orchestrator's "
                         f"timeout, or a person)")

    signal.signal(signal.SIGTERM, on_term)
    proposal = attempt(args.brief, args.worktree, args.settings)
    try:
        write_json(args.out, proposal.as_dict())
    except OSError as e:
        print(f"run: could not write the proposal to {args.out}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
