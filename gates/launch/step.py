"""Starting one step side: a revision's tree checked out under ``runs/`` and ``gates.side.driver
run`` started on it with a spec, as one process or, when the spec's ``world`` is above 1, as its
ranks (:func:`gates.launch.ranks.run`). ``kern step``, ``kern profile`` and the loop's profile of
main all run their step through :func:`run_step`; each makes its own spec (what it measures:
rows, replays, the per-op profile), its own timeout (kern.yaml ``step.timeout_s`` /
``profile.timeout_s``) and its :class:`~gates.requests.Placement` (kern.yaml's sandbox, the
slot's GPUs where a slot is held, main's compiled cache where there is one). Shell only: the
decisions are the callers' specs."""
from __future__ import annotations

import json
from pathlib import Path

from . import checkout
from ..requests import Placement
from .process import SideOutcome
from .ranks import run


def run_step(repo: Path, sha: str, runs: Path, spec: dict, out: Path, timeout_s: float,
             place: Placement, progress=None, stamp: dict | None = None) -> SideOutcome:
    """Run the step side of commit ``sha`` (or ``WORKTREE``) on ``spec`` at ``place``, writing
    its result to ``out``. ``stamp``: fields added to a result that came back whole (the commit
    and kern.yaml's hash), written to ``out`` with it."""
    tree = checkout.checkout(repo, sha, runs)
    res = run("run", tree, spec, out, timeout_s, place, progress=progress)
    if res.ok and stamp:
        res.result.update(stamp)
        out.write_text(json.dumps(res.result, indent=1, default=str))
    return res
