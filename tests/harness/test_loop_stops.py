"""When ``kern loop`` stops by itself, on a repository that holds only kern.yaml (no gate runs):
a spent budget starts no attempt, lets those in flight finish, then stops and says why in the
ledger and in ``kern status``; a tick that collects nothing while an agent works is not idle."""
from __future__ import annotations

import errno
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import cli
from harness import ledger as L
from harness.agents.common import AgentConfigError
from harness.agents.replay import DEATHS_PER_PATCH, ReplayUse, next_patches, queue_order
from harness.orchestrator import (Orchestrator, agent_never_proposed, attempt_dir, budget_spent,
                                  failure_reason, no_time_to_judge)
from harness.pipeline import Context
from harness.settings import Budgets, load
from harness.worktrees import Repo
from tests.gates.candidates import make_repo


def light_repo(tmp_path: Path, overrides: dict) -> Path:
    """A git repository holding kern.yaml (``overrides``: 'section.key' -> value) and no tree."""
    return make_repo(tmp_path, overrides, tree=False)


def orchestrator(repo: Path) -> Orchestrator:
    s = load(repo / "kern.yaml")
    ctx = Context(Repo(repo), s.resolve(False), repo / "runs", False,
                  L.Ledger(L.default_path(repo)), progress=lambda m: None, settings_digest=s.digest)
    return Orchestrator(ctx)


def working_agent(orch: Orchestrator) -> tuple[int, subprocess.Popen]:
    """An attempt whose agent process is still working (a sleep standing in for the agent)."""
    led = orch.led
    n = led.new_attempt(title="t", hypothesis="", target="moe.experts", backend="command",
                        base_sha=orch.ctx.repo.main_sha(), phase_id=None)
    d = attempt_dir(orch.ctx.runs, n)
    d.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)
    (d / "agent.pid").write_text(str(proc.pid))
    led.transition(n, L.RUNNING)
    return n, proc


def finish(orch: Orchestrator, n: int, proc: subprocess.Popen, cost: float) -> None:
    (attempt_dir(orch.ctx.runs, n) / "proposal.json").write_text(json.dumps(
        {"kind": "declined", "message": "no idea left", "estimate_ms": 0.0, "cost_usd": cost}))
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("use,hours,words", [
    ({"attempts": 3, "tokens": 0, "cost_usd": 0.0}, 0, "attempt budget spent (3 of budgets.attempts 3)"),
    ({"attempts": 1, "tokens": 10, "cost_usd": 0.0}, 0, "token budget spent (10 of budgets.tokens 10)"),
    ({"attempts": 1, "tokens": 0, "cost_usd": 2.5}, 0,
     "cost budget spent ($2.50 of budgets.cost_usd $2.00)"),
    ({"attempts": 1, "tokens": 0, "cost_usd": 0.0}, 1.25,
     "wall-time budget spent (1.2 h of budgets.wall_hours 1 h)"),
    ({"attempts": 2, "tokens": 9, "cost_usd": 1.99}, 0.9, None),
])
def test_which_budget_is_spent(use, hours, words):
    assert budget_spent(Budgets(attempts=3, tokens=10, wall_hours=1, cost_usd=2.0), use, hours) == words


def test_a_spent_cost_budget_lets_the_attempts_in_flight_finish_then_stops_and_says_why(
        tmp_path, capsys):
    repo = light_repo(tmp_path, {"budgets.cost_usd": 1.0, "loop.concurrency": 1})
    orch = orchestrator(repo)
    n, proc = working_agent(orch)
    try:
        orch.led.update(n, cost_usd=1.5)  # what the agent reported so far (a crash keeps it)
        first = orch.tick()
    finally:
        finish(orch, n, proc, cost=1.5)
    assert first.stop is None and first.spawned == [] and first.draining == \
        "cost budget spent ($1.50 of budgets.cost_usd $1.00)"
    assert orch.led.attempt(n).state == L.RUNNING and orch.led.stops() == {}
    second = orch.tick()
    assert second.collected == [(n, L.NOT_DONE, "no idea left")] and second.spawned == []
    assert second.stop == "cost budget spent ($1.50 of budgets.cost_usd $1.00)"
    (end,) = orch.led.stops().values()
    assert (end.run, end.how, end.reason) == (orch.run_id, L.RUN_BUDGET, second.stop)
    orch.led.close()
    assert cli.main(["--repo", str(repo), "status"]) == 0
    out = capsys.readouterr().out
    assert "cost $1.50 / $1.00" in out
    assert f"stopped    {end.at} · budget spent: cost budget spent ($1.50 of budgets.cost_usd $1.00)" in out
    assert f"to {end.at}: " in out  # the run's span ends where it stopped
    assert cli.main(["--repo", str(repo), "status", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["run"]["stopped"] == {"at": end.at, "how": "budget spent", "reason": second.stop}
    assert d["run"]["running"] is None and d["budget"]["cost_usd"] == {"used": 1.5, "limit": 1.0}


@pytest.mark.parametrize("hours,judged,words", [
    (0.0, [], None),  # before the loop's first judgment: it starts
    (0.5, [], None),
    (0.9, [300.0], None),  # 360 s left, the longest took 300 s
    (0.9, [300.0, 361.0], "wall-time budget nearly spent: 360 s of budgets.wall_hours 1 h left, and this "
     "loop's longest judgment took 361 s; the attempts collected wait, queued, for the next loop"),
    (1.0, [], "wall-time budget spent (1.0 h of budgets.wall_hours 1 h)"),
    (1.2, [5.0], "wall-time budget spent (1.2 h of budgets.wall_hours 1 h)"),
])
def test_whether_the_wall_budget_left_fits_another_judgment(hours, judged, words):
    assert no_time_to_judge(Budgets(attempts=3, tokens=10, wall_hours=1, cost_usd=2.0), hours, judged) == words


@pytest.mark.parametrize("judged,first,words", [
    ([], 300.0, None),
    ([], 400.0, "wall-time budget nearly spent: 360 s of budgets.wall_hours 1 h left, and a first judgment "
     "is counted (loop.first_judgment_s) as 400 s; the attempts collected wait, queued, for the next loop"),
    ([100.0], 400.0, None),  # once the loop has judged, its own judgments count, not the setting
])
def test_before_its_first_judgment_the_loop_counts_the_configured_seconds(judged, first, words):
    assert no_time_to_judge(Budgets(attempts=3, tokens=10, wall_hours=1, cost_usd=2.0), 0.9, judged,
                            first) == words


@pytest.mark.parametrize("compile_s,words", [
    (0.0, None),  # main compiled already: 300 s fit in the 360 s left
    (85.0, "wall-time budget nearly spent: 360 s of budgets.wall_hours 1 h left, and this loop's longest "
     "judgment took 300 s and main's compile 85 s (main changed since it was compiled); the attempts "
     "collected wait, queued, for the next loop"),
])
def test_a_new_main_counts_its_compile_on_top_of_the_longest_judgment(compile_s, words):
    assert no_time_to_judge(Budgets(attempts=3, tokens=10, wall_hours=1, cost_usd=2.0), 0.9, [300.0], 360.0,
                            compile_s) == words


@given(st.floats(0, 2), st.lists(st.floats(0, 9000), max_size=6), st.floats(0, 9000), st.floats(0, 900))
def test_a_judgment_starts_only_while_the_longest_one_fits_in_the_wall_budget_left(hours, judged, first,
                                                                                   compile_s):
    why = no_time_to_judge(Budgets(attempts=3, tokens=10, wall_hours=1, cost_usd=2.0), hours, judged, first,
                           compile_s)
    left = 3600 - hours * 3600
    assert (why is None) == (left > 0 and left >= (max(judged) + compile_s if judged else first))


def test_a_commit_whose_judgment_would_outlast_the_wall_budget_waits_queued_and_the_loop_stops(tmp_path):
    repo = light_repo(tmp_path, {"budgets.wall_hours": 1.0, "loop.concurrency": 1})
    orch = orchestrator(repo)
    main = orch.ctx.repo.main_sha()
    n = orch.led.new_attempt(title="t", hypothesis="", target="moe.experts", backend="command",
                             base_sha=main, phase_id=None)
    orch.led.update(n, commit_sha=main)  # a commit re-queued by a restart: judged by the next collect
    orch.judged_s = [3700.0]  # this loop's longest judgment outlasts the hour the budget has left
    report = orch.tick()
    assert re.fullmatch(r"wall-time budget nearly spent: 3[56]\d\d s of budgets.wall_hours 1 h left, and "
                        r"this loop's longest judgment took 3700 s; the attempts collected wait, "
                        r"queued, for the next loop", report.stop)
    assert report.spawned == [] and report.collected == []
    assert orch.led.attempt(n).state == L.QUEUED and orch.led.attempt(n).commit_sha == main
    (end,) = orch.led.stops().values()
    assert (end.how, end.reason) == (L.RUN_BUDGET, report.stop)


@pytest.mark.parametrize("compiled", [True, False])
def test_main_s_compile_is_counted_only_once_main_has_changed_since_it_was_compiled(tmp_path, compiled):
    repo = light_repo(tmp_path, {"budgets.wall_hours": 1.0, "loop.concurrency": 1})
    orch = orchestrator(repo)
    main = orch.ctx.repo.main_sha()
    n = orch.led.new_attempt(title="t", hypothesis="", target="moe.experts", backend="command",
                             base_sha=main, phase_id=None)
    orch.led.update(n, commit_sha=main)
    # judgments of 60 s less their compile fit the hour; a compile of 3 700 s on top does not
    orch.judged_s, orch.compile_main_s = [60.0], [3700.0]
    orch.compiled_mains = {main} if compiled else {"0" * 40}
    report = orch.tick(spawn=False)
    if compiled:
        assert report.stop is None and orch.led.attempt(n).state != L.QUEUED
    else:
        assert "this loop's longest judgment took 60 s and main's compile 3700 s" in report.stop
        assert orch.led.attempt(n).state == L.QUEUED


@pytest.mark.parametrize("merged", [False, True])
def test_a_tick_whose_judgment_merged_with_no_time_left_to_judge_the_new_main_neither_profiles_nor_briefs(
        tmp_path, merged):
    repo = light_repo(tmp_path, {"budgets.wall_hours": 1.0, "loop.concurrency": 1,
                                 "loop.trial_merge_parts": 0})
    orch = orchestrator(repo)
    # main was compiled; judgments take 60 s less main's compile, and a compile takes 3 700 s: a
    # judgment against main fits the hour left, one against a new main does not
    orch.judged_s, orch.compile_main_s = [60.0], [3700.0]
    orch.compiled_mains = {orch.ctx.repo.main_sha()}
    judge = orch.collect

    def collect(report):  # this tick's judgment: it started in time, and merged (main moved)
        judge(report)
        if merged:
            subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "merged"],
                           check=True)
    orch.collect = collect
    profiled = []

    def profile():
        profiled.append(orch.ctx.repo.main_sha())
        return {"profile": {"ops": [], "step_ms": 1.0}}
    orch.profile = profile
    report = orch.tick()
    if not merged:
        assert report.stop is None and profiled == [orch.ctx.repo.main_sha()]
    else:
        assert "main's compile 3700 s (main changed since it was compiled)" in report.stop
        assert profiled == [] and report.spawned == []
        (end,) = orch.led.stops().values()
        assert (end.how, end.reason) == (L.RUN_BUDGET, report.stop)


def test_a_tick_that_collects_nothing_while_an_agent_works_is_not_idle(tmp_path):
    repo = light_repo(tmp_path, {"loop.stop_after_idle_ticks": 1, "loop.concurrency": 1,
                                 "loop.trial_merge_parts": 0})
    orch = orchestrator(repo)
    n, proc = working_agent(orch)
    try:
        reports = [orch.tick() for _ in range(3)]
    finally:
        finish(orch, n, proc, cost=0.0)
    assert [(r.collected, r.spawned, r.stop) for r in reports] == [([], [], None)] * 3
    assert orch.idle_ticks == 0 and orch.led.attempt(n).state == L.RUNNING


def dead_agent(orch: Orchestrator, last_words: str, source: str | None = None) -> int:
    """An attempt whose agent process ended without a proposal, its log ending with ``last_words``
    (``source``: the replay patch it was handed)."""
    led = orch.led
    n = led.new_attempt(title="t", hypothesis="", target="moe.experts", backend="replay",
                        base_sha=orch.ctx.repo.main_sha(), phase_id=None, source=source)
    d = attempt_dir(orch.ctx.runs, n)
    d.mkdir(parents=True)
    (d / "agent.log").write_text(f"Traceback (most recent call last):\n  File \"x.py\"\n{last_words}\n\n")
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    (d / "agent.pid").write_text(str(proc.pid))
    led.transition(n, L.RUNNING)
    return n


def test_agents_that_die_before_proposing_stop_the_loop_after_the_limit_in_a_row(tmp_path):
    # 2026-12-05 on the GPU machine: every replay agent failed its first import, and the loop
    # used up 22 replay patches in four minutes, each row saying only "see the log"
    repo = light_repo(tmp_path, {"loop.concurrency": 0, "loop.stop_after_agent_crashes": 2,
                                 "loop.trial_merge_parts": 0})
    orch = orchestrator(repo)
    words = "ModuleNotFoundError: No module named 'annotated_types'"
    first = dead_agent(orch, words)
    report = orch.tick(spawn=False)
    assert report.stop is None and orch.led.attempt(first).state == L.CRASHED
    assert words in orch.led.attempt(first).reason  # the row says why, not only where the log is
    n, proc = working_agent(orch)  # an agent that proposes in between: the count starts again
    finish(orch, n, proc, cost=0.0)
    second = dead_agent(orch, words)
    assert orch.tick(spawn=False).stop is None
    third = dead_agent(orch, "OSError: [Errno 2] No such file or directory: 'claude'")
    report = orch.tick(spawn=False)
    assert [s for _, s, _ in report.collected] == [L.CRASHED]
    assert report.stop == ("environment: 2 agents in a row ended without a proposal; the last one's log "
                           "ends: OSError: [Errno 2] No such file or directory: 'claude'. Operator: run that "
                           "agent by hand (python -m harness.agents.run, its attempt folder's settings) and "
                           "mend its environment")
    (end,) = orch.led.stops().values()
    assert (end.how, end.reason) == (L.RUN_HALTED, report.stop)
    assert {orch.led.attempt(k).state for k in (second, third)} == {L.CRASHED}


def test_the_limit_zero_never_stops_the_loop_for_dead_agents(tmp_path):
    repo = light_repo(tmp_path, {"loop.concurrency": 0, "loop.stop_after_agent_crashes": 0,
                                 "loop.trial_merge_parts": 0})
    orch = orchestrator(repo)
    for _ in range(3):
        dead_agent(orch, "ImportError: boom")
        assert orch.tick(spawn=False).stop is None


def test_a_replay_patch_whose_agent_died_goes_to_the_next_attempt_while_another_is_in_flight(tmp_path, capsys):
    # 2026-12-05: handing out patches by counting replay rows gave a dead agent's patch to no one
    from tests.harness.test_faults import fake_profile

    repo = light_repo(tmp_path, {"agent.backend": "replay", "agent.replay_dir": "patches",
                                 "loop.concurrency": 2, "loop.trial_merge_parts": 0,
                                 "loop.stop_after_agent_crashes": 0})
    patches = repo / "patches"
    patches.mkdir()
    for name in ("01-a", "02-b", "03-c"):
        (patches / f"{name}.json").write_text(json.dumps({"declined": f"idea {name}", "estimate_ms": -0.1}))
    fake_profile(repo, ["moe.experts", "mla.topk"])
    orch = orchestrator(repo)
    dead = dead_agent(orch, "ImportError: boom", source="01-a.json")
    busy = orch.led.new_attempt(title="t", hypothesis="", target="moe.experts", backend="replay",
                                base_sha=orch.ctx.repo.main_sha(), phase_id=None, source="02-b.json")
    orch.led.transition(busy, L.RUNNING)  # in flight (its agent not collectable: no pid file)
    d = attempt_dir(orch.ctx.runs, busy)
    d.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    (d / "agent.pid").write_text(str(proc.pid))
    try:
        report = orch.tick()
        (again, _), = report.spawned
        assert orch.led.attempt(dead).state == L.CRASHED
        assert orch.led.sources()[again] == "01-a.json"  # not 03-c: 01-a was never read
        settings = json.loads((attempt_dir(orch.ctx.runs, again) / "settings.json").read_text())
        assert settings["context"]["index"] == 0
        orch.wait_agents([again], 60)
    finally:
        finish(orch, busy, proc, cost=0.0)
    assert orch.tick(spawn=False).collected == [(busy, L.NOT_DONE, "no idea left"),
                                                (again, L.NOT_DONE, "idea 01-a")]
    # 01-a's second death uses it up (a patch that kills its agent must not stall the loop)
    second = dead_agent(orch, "ImportError: boom", source="01-a.json")
    orch.tick(spawn=False)
    assert orch.led.attempt(second).state == L.CRASHED
    report = orch.tick()
    assert [orch.led.sources()[n] for n, _ in report.spawned] == ["03-c.json"]
    capsys.readouterr()
    assert cli.main(["--repo", str(repo), "show", str(again)]) == 0
    assert "handed 01-a.json" in capsys.readouterr().out  # kern show names the patch
    assert cli.main(["--repo", str(repo), "show", str(again), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "01-a.json"


@pytest.mark.parametrize("uses,count,want", [
    ([], 2, [0, 1]),
    # rows from before rows named their patch: the one at their place among replay attempts
    ([ReplayUse(None, False), ReplayUse(None, True)], 2, [1, 2]),
    ([ReplayUse(None, False), ReplayUse("c", False)], 3, [1, 3, 4]),
    ([ReplayUse("a", True), ReplayUse("b", False)], 1, [0]),
    ([ReplayUse("a", True), ReplayUse("a", True), ReplayUse("b", False)], 2, [2, 3]),
    ([ReplayUse("a", True), ReplayUse("a", False)], 1, [1]),  # re-offered once, now read
    ([ReplayUse("gone", False)], 1, [0]),  # a patch since removed from the folder holds nothing
])
def test_next_patches(uses, count, want):
    assert next_patches(["a", "b", "c", "d"], uses, count) == want


@given(st.lists(st.tuples(st.sampled_from([None, "a", "b", "c", "x"]), st.booleans()), max_size=8),
       st.integers(0, 5))
def test_next_patches_hands_out_each_free_patch_once_in_order(raw, count):
    names = ["a", "b", "c"]
    uses = [ReplayUse(p, u) for p, u in raw]
    got = next_patches(names, uses, count)
    assert len(got) == count and got == sorted(got)
    real = [i for i in got if i < len(names)]
    assert len(set(real)) == len(real) and all(i == len(names) for i in got[len(real):])
    for i in real:  # nothing handed out that a row holds or that killed DEATHS_PER_PATCH agents
        mine = [u for k, u in enumerate(uses) if (u.patch or (names[k] if k < 3 else None)) == names[i]]
        assert all(u.unread for u in mine) and len(mine) < DEATHS_PER_PATCH


@pytest.mark.parametrize("uses,order,count,want", [
    ([], ["c", "a"], 4, [2, 0, 1, 3]),
    ([ReplayUse("c", False)], ["c", "a"], 2, [0, 1]),  # a ranked patch already held is skipped
    # a row from before rows named their patch holds the patch at its place, whatever the order
    ([ReplayUse(None, False)], ["b", "a"], 2, [1, 2]),
    ([ReplayUse("d", True)], ["d"], 1, [3]),  # a patch whose agent died unread, re-offered first
])
def test_next_patches_hands_out_the_ranked_waiting_patches_first(uses, order, count, want):
    assert next_patches(["a", "b", "c", "d"], uses, count, order) == want


@given(st.lists(st.tuples(st.sampled_from([None, "a", "b", "c", "x"]), st.booleans()), max_size=8),
       st.permutations(["a", "b", "c"]), st.integers(0, 3), st.integers(0, 5))
def test_an_order_changes_which_patch_comes_first_never_which_are_handed_out(raw, perm, k, count):
    names, order = ["a", "b", "c"], list(perm[:k])
    uses = [ReplayUse(p, u) for p, u in raw]
    plain, ranked = next_patches(names, uses, 3 + count), next_patches(names, uses, 3 + count, order)
    assert sorted(plain) == sorted(ranked)
    real = [names[i] for i in ranked if i < len(names)]
    listed = [n for n in real if n in order]
    assert real[:len(listed)] == sorted(listed, key=order.index)  # ranked ones first, in order


def test_the_loop_hands_out_the_patch_order_ranks_first_and_refuses_an_unknown_name(tmp_path, capsys):
    from tests.harness.test_faults import fake_profile

    repo = light_repo(tmp_path, {"agent.backend": "replay", "agent.replay_dir": "patches",
                                 "loop.concurrency": 1, "loop.trial_merge_parts": 0})
    patches = repo / "patches"
    patches.mkdir()
    for name in ("01-a", "02-b", "03-c"):
        (patches / f"{name}.json").write_text(json.dumps({"declined": f"idea {name}", "estimate_ms": -0.1}))
    (patches / "ORDER").write_text("# the orchestrator's ranking\n03-c.json  # measured fastest\n")
    fake_profile(repo, ["moe.experts", "mla.topk"])
    orch = orchestrator(repo)
    (first, _), = orch.tick().spawned
    assert orch.led.sources()[first] == "03-c.json"
    settings = json.loads((attempt_dir(orch.ctx.runs, first) / "settings.json").read_text())
    assert settings["context"]["index"] == 2  # its place in file-name order
    orch.wait_agents([first], 60)
    assert orch.tick(spawn=False).collected == [(first, L.NOT_DONE, "idea 03-c")]
    (patches / "ORDER").write_text("04-d.json\n")
    with pytest.raises(AgentConfigError, match="lists 04-d.json, which are not patch files"):
        queue_order(patches)
    # edited so while the loop runs: the loop stops and says what to mend, nothing handed out
    report = orch.tick()
    assert report.spawned == [] and "lists 04-d.json" in report.stop
    # kern loop refuses to start on it
    capsys.readouterr()
    assert cli.main(["--repo", str(repo), "loop", "--ticks", "1", "--no-live"]) == 2
    assert "kern loop: refusing to start: replay: " in capsys.readouterr().err


@pytest.mark.parametrize("state,reason,unread", [
    (L.CRASHED, f"{L.AGENT_DIED}: ImportError: boom (log x)", True),
    (L.CRASHED, "starting the agent failed: OSError: no worktree", True),
    (L.CRASHED, failure_reason("starting the agent", OSError(errno.ENOSPC, "full"))[0], True),
    (L.CRASHED, "the loop stopped before this attempt's agent started; nothing was judged", True),
    (L.CRASHED, "agent returned garbage in proposal.json: expected a JSON object", False),  # it ran
    (L.CRASHED, "kern test: the candidate's side ended with error", False),
    (L.TIMED_OUT, "agent ran past 600s", False),
    (L.INTERRUPTED, "kern cancel", False),  # the user ended it: its patch is not handed out again
    (L.NOT_DONE, "declined", False),
])
def test_which_ended_attempts_left_their_replay_patch_unread(state, reason, unread):
    assert agent_never_proposed(L.Attempt(1, state=state, reason=reason)) is unread
