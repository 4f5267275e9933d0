"""The loop merges a faster replay patch (CPU, real gates): its judgment (accuracy gate, the
scorer's A/B, the re-measurement of a large gain) ends merged, main moves once to its commit,
which carries the verdict, main's score is recorded before and after, and the journey names
the result. The base launches SiTU 120 times; the patch launches it once
(tests/harness/loop_replay.py)."""
from __future__ import annotations

import json

import pytest

from harness.journey import markdown, result
from tests.harness.loop_replay import BASE_PASSES, passes_patch, replay_loop, replay_repo

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def merge_run(tmp_path_factory):
    repo, patches = replay_repo(tmp_path_factory.mktemp("loop-merge"), BASE_PASSES, concurrency=1)
    passes_patch(repo, "00-faster.patch", patches, 1, "moe.situ: launch once", target="moe.situ")
    return repo, replay_loop(repo, spawning_ticks=1)


def test_the_faster_patch_is_merged_and_briefed_on_its_target(merge_run):
    repo, ctx = merge_run
    attempts = ctx.ledger.attempts()
    # on failure, the gate's own record says which check or measurement decided
    assert [(a.title, a.state, a.reason) for a in attempts] == [("moe.situ: launch once", "merged", None)], \
        [(a.title, a.state, a.reason, a.gate) for a in attempts]
    # a patch that names its target is briefed and recorded on it, whatever the planner's pick
    a = attempts[0]
    assert a.target == "moe.situ", a.target
    brief = (repo / "runs" / "attempts" / str(a.number) / "brief.md").read_text()
    assert "make `moe.situ` faster" in brief


def test_main_moved_once_and_carries_the_verdict(merge_run):
    repo, ctx = merge_run
    merged = [a for a in ctx.ledger.attempts() if a.state == "merged"]
    assert len(merged) == 1
    assert ctx.repo.main_sha() == merged[0].commit_sha
    note = json.loads(ctx.repo.note(merged[0].commit_sha))
    assert note["state"] == "merged" and note["accuracy"].startswith("PASS")
    # main's score: its A-side baseline before the merge, then the merged commit's
    shas = [s.sha for s in ctx.ledger.scores()]
    assert shas[0] == merged[0].base_sha and merged[0].commit_sha in shas, shas
    assert not any(p.name.startswith("attempt-") for p in (repo / "runs" / "worktrees").iterdir())


def test_journey_names_the_merge(merge_run):
    _, ctx = merge_run
    md = markdown(ctx.ledger.attempts(), ctx.ledger.phases(), scores=ctx.ledger.scores())
    assert "merged" in md, md
    assert all(result(a) for a in ctx.ledger.attempts())
