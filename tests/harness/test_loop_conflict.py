"""A replay patch that the gates would merge ends abandoned for conflict once main moved
under it (CPU, real gates): the agent branches from main, main then takes a commit that
rewrites the same line (another process's merge), and the loop judges the patch against the
main it branched from (accuracy gate, the scorer's A/B, the re-measurement of a large gain),
finds main moved, fails to rebase and records the conflict; main keeps the other commit. The
same path with the loop's own merge moving main is tests/harness/test_order.py's, on gate
stand-ins; this module judges one patch so that its fixture stays under 5 minutes on the CI
machine (tests/harness/loop_replay.py)."""
from __future__ import annotations

import git
import pytest

from harness.journey import markdown, result
from tests.harness.loop_replay import BASE_PASSES, LOOP_LINE, SITU, passes_patch, replay_loop, replay_repo

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def conflict_run(tmp_path_factory):
    repo, patches = replay_repo(tmp_path_factory.mktemp("loop-conflict"), BASE_PASSES, concurrency=1)
    passes_patch(repo, "00-twice.patch", patches, 2, "moe.situ: launch twice")

    def main_moves():
        """Main takes a commit on the line the patch rewrites, after the agent branched."""
        p = repo / SITU
        p.write_text(p.read_text().replace(LOOP_LINE, "    for _ in range(1):  # the work once\n", 1))
        r = git.Repo(repo)
        r.git.commit("-qam", "moe.situ: launch once (merged elsewhere)")
        return r.head.commit.hexsha

    moved = []
    ctx = replay_loop(repo, spawning_ticks=1, between=lambda: moved.append(main_moves()))
    return repo, ctx, moved[0]


def test_a_winning_patch_on_a_moved_main_ends_in_conflict(conflict_run):
    repo, ctx, moved = conflict_run
    attempts = ctx.ledger.attempts()
    assert [(a.title, a.state, a.reason) for a in attempts] == \
        [("moe.situ: launch twice", "abandoned", "conflict")], \
        [(a.title, a.state, a.reason, a.gate) for a in attempts]
    a = attempts[0]
    # judged against the main it branched from, and the gates would have merged it there
    assert a.base_sha != moved and git.Repo(repo).is_ancestor(a.base_sha, moved)
    assert a.decision == "merge" and a.delta_ms < 0 and a.gate.conflict, (a.decision, a.delta_ms, a.gate)
    assert ctx.repo.main_sha() == moved  # main keeps the other commit, nothing merged over it
    assert not any(p.name.startswith("attempt-") for p in (repo / "runs" / "worktrees").iterdir())


def test_journey_names_the_conflict(conflict_run):
    _, ctx, _ = conflict_run
    md = markdown(ctx.ledger.attempts(), ctx.ledger.phases(), scores=ctx.ledger.scores())
    assert "abandoned: conflict" in md, md
    assert all(result(a) for a in ctx.ledger.attempts())
