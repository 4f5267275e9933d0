"""The loop rejects replay patches, each for its own reason (CPU, real gates): slower (the
scorer's A/B), accuracy (the accuracy gate), scope (the scope gate: kern.yaml loosened) and a
crashed agent; main never moves and the journey names every result. The base launches SiTU
once (tests/harness/loop_replay.py LIGHT_BASE_PASSES: nothing here is to be found faster), so
the slower patch's A/B costs a third of one against the 120-pass base."""
from __future__ import annotations

import json

import git
import pytest

from harness.journey import markdown, result
from tests.harness.loop_replay import (LIGHT_BASE_PASSES, SLOWER_PASSES, patch, passes_patch, replay_loop,
                                       replay_repo)

pytestmark = pytest.mark.slow
SLOWER = f"moe.situ: launch {SLOWER_PASSES} times"


@pytest.fixture(scope="module")
def rejects_run(tmp_path_factory):
    repo, patches = replay_repo(tmp_path_factory.mktemp("loop-rejects"), LIGHT_BASE_PASSES, concurrency=2)
    base = git.Repo(repo).head.commit.hexsha
    passes_patch(repo, "00-slower.patch", patches, SLOWER_PASSES, SLOWER)
    patch(repo, "01-accuracy.patch", [("kernels/k31/kda/core.py", "s = s * decay[:, None, :]", "s = s")],
          patches, "kda.core: no decay", target="kda.core")
    patch(repo, "02-scope.patch", [("kern.yaml", "kl_fail: 0.05", "kl_fail: 50.0")], patches,
          "loosen the gate")
    (patches / "03-failed.json").write_text(json.dumps({"failed": "the agent fell over"}))
    return repo, replay_loop(repo, spawning_ticks=2), base


def test_each_patch_is_rejected_for_its_own_reason(rejects_run):
    repo, ctx, _ = rejects_run
    by_title = {a.title: a for a in ctx.ledger.attempts()}
    outcomes = {t: (a.state, a.reason) for t, a in by_title.items()}
    # on failure, the gate's own record says which check or measurement decided
    why = {t: a.gate for t, a in by_title.items()}
    assert outcomes[SLOWER] == ("abandoned", "slower"), (outcomes, why)
    assert outcomes["kda.core: no decay"] == ("abandoned", "accuracy"), outcomes
    assert outcomes["loosen the gate"] == ("abandoned", "scope"), outcomes
    crashed = [a for a in ctx.ledger.attempts() if a.state == "crashed"]
    assert len(crashed) == 1 and "fell over" in crashed[0].reason
    assert len(by_title) == 4, outcomes
    # a patch that names its target is briefed and recorded on it, whatever the planner's pick
    a = by_title["kda.core: no decay"]
    assert a.target == "kda.core", a.target
    brief = (repo / "runs" / "attempts" / str(a.number) / "brief.md").read_text()
    assert "make `kda.core` faster" in brief


def test_main_never_moved(rejects_run):
    repo, ctx, base = rejects_run
    assert ctx.repo.main_sha() == base
    assert not [a for a in ctx.ledger.attempts() if a.state == "merged"]
    assert not any(p.name.startswith("attempt-") for p in (repo / "runs" / "worktrees").iterdir())


def test_journey_names_every_rejection(rejects_run):
    _, ctx, _ = rejects_run
    md = markdown(ctx.ledger.attempts(), ctx.ledger.phases(), scores=ctx.ledger.scores())
    for text in ("abandoned: slower", "abandoned: accuracy", "abandoned: scope", "crashed"):
        assert text in md, md
    assert all(result(a) for a in ctx.ledger.attempts())
