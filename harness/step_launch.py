"""Starting one step side from the loop's process: a revision's tree checked out under ``runs/``
and ``gates.side.driver run`` started on it with a spec, as one process or, when the spec's
``world`` is above 1, as its ranks (``gates.launch_ranks.run``). ``kern step``, ``kern profile``
and the loop's profile of main all run their step through :func:`run_step`; each makes its own
spec (what it measures: rows, replays, the per-op profile) and its own timeout (kern.yaml
``step.timeout_s`` / ``profile.timeout_s``). Shell only: the decisions are the callers'
specs."""
from __future__ import annotations

from pathlib import Path


def run_step(repo: Path, sha: str, runs: Path, spec: dict, out: Path, timeout_s: float,
             progress=None, stamp: dict | None = None, sandbox_mode: str | None = None,
             seed: str | None = None):
    """Run the step side of commit ``sha`` (or ``WORKTREE``) on ``spec``, writing its result
    to ``out``; returns the ``gates.launch.SideOutcome``. ``stamp``: fields added to a result that
    came back whole (the commit and kern.yaml's hash), written to ``out`` with it;
    ``sandbox_mode``: kern.yaml's ``sandbox`` (None: auto); ``seed``: the compiled cache the
    side's private Triton cache is copied from (``gates.compiled``; None: it starts empty)."""
    import json

    from gates import checkout, launch_ranks, sandbox

    tree = checkout.checkout(repo, sha, runs)
    with sandbox.configured(sandbox_mode), sandbox.seeded(seed):
        res = launch_ranks.run("run", tree, spec, out, timeout_s, progress=progress)
    if res.ok and stamp:
        res.result.update(stamp)
        out.write_text(json.dumps(res.result, indent=1, default=str))
    return res
