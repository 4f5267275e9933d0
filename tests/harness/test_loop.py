"""The whole loop on a temporary repository with the small tree (CPU, real gates).

Replay patches must end merged / abandoned for accuracy / abandoned slower / rejected for
scope / crashed / conflicted after main moved; the tuner must find a better setting; a
``kern try`` killed with SIGKILL during a gate resumes with no row lost or duplicated.
The base tree of the repository carries deliberate extra work (SiTU launched 120 times, a
tunable) so that faster and slower candidates are unmistakable even on the interpreter.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest

from gates.scorer import bench_settings
from harness.journey import markdown, result
from harness.orchestrator import Orchestrator
from harness.settings import load
from tests.gates.candidates import ROOT, context, make_repo
from tests.gates.cpu_load import classifications

# slow: after the unit tests (.ci/run), on one of two workers, so an A/B here shares the two
# cores with the other worker's slow tests: see LIGHT for how the A/Bs stay decided
pytestmark = pytest.mark.slow
SITU = "kernels/k31/moe/situ.py"
SITU_TUNABLES = "kernels/k31/moe/tunables.py"
LAUNCH = "    _situ_kernel[(cdiv(rows, block_r), cdiv(inter, block))](\n"
BASE_PASSES = 120  # moe.situ.passes in slow_base: the work the patches remove or add


def slow_base(repo: Path) -> None:
    """Commit a base whose SiTU launches ``moe.situ.passes`` (``BASE_PASSES``) times: work to find."""
    p = repo / SITU
    s = p.read_text()
    assert LAUNCH in s, "update the test: moe/situ.py's launch line changed"
    s = s.replace(LAUNCH, "    for _ in range(tunables.get(\"moe.situ.passes\")):  # repeated work\n     "
                  + LAUNCH.lstrip(" "))
    p.write_text(s)
    t = repo / SITU_TUNABLES
    ts = t.read_text()
    assert "TUNABLES = {" in ts
    t.write_text(ts.replace("TUNABLES = {", f"TUNABLES = {{\n    \"moe.situ.passes\": ({BASE_PASSES}, (1, {BASE_PASSES})),", 1))
    r = git.Repo(repo)
    r.git.add("-A")
    r.git.commit("-m", "base with repeated SiTU work")


def patch(repo: Path, name: str, edits: list, folder: Path, subject: str, target: str | None = None) -> None:
    """Write a plain diff (``subject`` on its first line, then ``Target: target`` when given)
    made from ``edits`` on main."""
    for path, old, new in edits:
        p = repo / path
        s = p.read_text()
        assert old in s, f"{name}: {path} lacks {old!r}"
        p.write_text(s.replace(old, new, 1))
    diff = git.Repo(repo).git.diff()
    git.Repo(repo).git.checkout("--", ".")
    (folder / name).write_text(f"{subject}\n" + (f"\nTarget: {target}\n\n" if target else "") + f"{diff}\n")


# loop mechanics, not gate coverage (tests/gates has the awkward sizes): one small bucket. The
# tap runs the test rows and every bucket: [1, 2]. The A/B is 12 rounds of one replay per
# visit, so each A replay is paired with the B replay next to it in time (A B B A) and a load
# swing on the shared CI machine mostly hits both of a pair. Measured (kern step --rows 2,
# load average 1.5): the base's step 2028 ms, SiTU once 899 ms (0.44 of it; 29 ms a pass).
# Under one busy loop and two bursty ones (plus this machine's other users, load average
# 4-8), 'once' against the base at the former 2 rounds x 3 replays: faster, faster, within
# noise (band 34 %, interval's high end -33.8 %: issue 18); at 12 x 1: faster twice (band 23
# and 19 %, high end -51.3 and -52.8 %); '120 times' slower (band 10.5 %, low end +89 %).
# Simulated on that load with one more bursty process (tests/gates/cpu_load.py, 1000 A/Bs
# each): at 2 x 3 'once' is faster in 330, 'twice' in 325; at 12 x 1 'once' in 1000, 'twice'
# in 998, '120 times' slower in 1000. The cost: 24 timed replays a side instead of 12.
# A gain above bench.reverify_pct is merged only after a re-measurement in alternating fresh
# processes (bench.reverify_rounds = 1 round: two visits a side, a process start of about 8 s
# between them, measured 42 s for the whole re-measurement). Against a base of 40 passes that
# shape called 'once' within noise in 141 of 1000 simulated A/Bs, and in CI (2026-12-01) both
# 'once' and 'twice' ended 'scorer check'; against 80 passes in 10 of 1000 (one busy, three
# bursty) and 1 of 1000 (one busy, two bursty: a busy loop beside the other worker). '200
# times' kept the slower patch as far above the base as '120 times' was above 40. (Those were
# the interpreter's costs before gates/interpreter.py; today's base and slower patch, and why,
# are under STEP_MS below.)
LIGHT = {"profiles.cpu.test_rows": [1], "profiles.cpu.buckets": [2], "profiles.cpu.weights": [1],
         "profiles.cpu.rounds": 12, "profiles.cpu.replays": 1}
# kern step --rows 2 with moe.situ.passes = 1 and = 40 (ms): the model's rest and a pass.
# Measured 2026-12-03 on this tree once the interpreter keeps its language patched
# (gates/interpreter.py), the fastest of 3 interleaved runs of 8 replays each: 985.5 and
# 1927.1 ms (in the same runs without it: 1801.1 and 2791.7, a pass 25.4 ms). The rest got
# 1.8x cheaper and a pass barely, so the base's work is a smaller share of its step than the
# 869.5 / 28.96 ms measured earlier made it: against 80 passes the re-measurement of 'once'
# came out within noise in 19 of 1000 (one busy, two bursty: 995 required) and of 'twice' in
# 52 of 1000 (three bursty: 980). 120 passes: 2 and 8 of 1000; the slower patch 260 passes
# (at 200 against 120 it was slower in 979 of 1000, not 997).
STEP_MS, PASS_MS = 961.4, 24.14
SLOWER_PASSES = 260  # the slower patch
REVERIFY_GAP_S = 8.0  # a side switch in alternating processes: a process start (about 8 s)


def test_the_ab_shape_tells_the_patches_apart_on_a_loaded_machine():
    """LIGHT's A/B of each SiTU patch against the base, simulated on a 2-core machine shared
    with one busy and three bursty processes, decided by the scorer's own statistics: at most
    3 of 1000 A/Bs undecided (at the former 2 rounds x 3 replays: 670 for 'once'); the
    re-measurement of a large gain (one round, alternating processes) at most 5 of 1000 with
    one busy and two bursty processes, 20 of 1000 with three bursty."""
    s = load(ROOT / "kern.yaml")
    cfg = bench_settings(s["bench"], s.profile(False))
    rounds, replays = LIGHT["profiles.cpu.rounds"], LIGHT["profiles.cpu.replays"]
    for passes, want in ((1, "faster"), (2, "faster"), (SLOWER_PASSES, "slower")):
        seen = classifications(passes, 1000, STEP_MS + BASE_PASSES * PASS_MS, STEP_MS + passes * PASS_MS,
                               rounds, replays, cfg)
        assert seen.get(want, 0) >= 997, (passes, seen)
    again = int(s["bench"]["reverify_rounds"])
    for passes in (1, 2):
        # the acceptance load of issue 18 (a busy loop beside the other worker's sides), then
        # the harsher model the A/B shape above is held to
        for bursty, least in ((2, 995), (3, 980)):
            seen = classifications(100 + passes, 1000, STEP_MS + BASE_PASSES * PASS_MS, STEP_MS + passes * PASS_MS,
                                   again, replays, cfg, bursty=bursty, gap_s=REVERIFY_GAP_S)
            assert seen.get("faster", 0) >= least, ("re-measurement", passes, bursty, seen)


@pytest.fixture(scope="module")
def replay_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loop")
    patches = tmp / "patches"
    patches.mkdir()
    repo = make_repo(tmp, {**LIGHT, "agent.backend": "replay", "agent.replay_dir": str(patches),
                           "loop.concurrency": 3, "test.timeout_s": 150})
    slow_base(repo)
    loop_line = "    for _ in range(tunables.get(\"moe.situ.passes\")):  # repeated work\n"
    patch(repo, "00-faster.patch", [(SITU, loop_line, "    for _ in range(1):  # the work once\n")],
          patches, "moe.situ: launch once", target="moe.situ")
    patch(repo, "01-conflict.patch", [(SITU, loop_line, "    for _ in range(2):  # twice\n")],
          patches, "moe.situ: launch twice")
    patch(repo, "02-slower.patch", [(SITU, loop_line, f"    for _ in range({SLOWER_PASSES}):  # more work\n")],
          patches, f"moe.situ: launch {SLOWER_PASSES} times")
    patch(repo, "03-accuracy.patch", [("kernels/k31/kda/core.py", "s = s * decay[:, None, :]", "s = s")],
          patches, "kda.core: no decay", target="kda.core")
    patch(repo, "04-scope.patch", [("kern.yaml", "kl_fail: 0.05", "kl_fail: 50.0")], patches,
          "loosen the gate")
    (patches / "05-failed.json").write_text(json.dumps({"failed": "the agent fell over"}))
    ctx, settings = context(repo)
    orch = Orchestrator(ctx, settings.data)
    reports = [orch.tick(wait_for_agents=120), orch.tick(wait_for_agents=120), orch.tick(spawn=False)]
    return repo, ctx, reports


def test_replay_patches_reach_every_outcome(replay_run):
    repo, ctx, _ = replay_run
    by_title = {a.title: a for a in ctx.ledger.attempts()}
    outcomes = {t: (a.state, a.reason) for t, a in by_title.items()}
    # on failure, the gate's own record says which check or measurement decided
    why = {t: a.gate for t, a in by_title.items()}
    assert outcomes["moe.situ: launch once"] == ("merged", None), (outcomes, why)
    assert outcomes["moe.situ: launch twice"] == ("abandoned", "conflict"), outcomes
    assert outcomes[f"moe.situ: launch {SLOWER_PASSES} times"] == ("abandoned", "slower"), (outcomes, why)
    assert outcomes["kda.core: no decay"] == ("abandoned", "accuracy"), outcomes
    assert outcomes["loosen the gate"] == ("abandoned", "scope"), outcomes
    crashed = [a for a in ctx.ledger.attempts() if a.state == "crashed"]
    assert len(crashed) == 1 and "fell over" in crashed[0].reason
    # a patch that names its target is briefed and recorded on it, whatever the planner's pick
    for title, target in (("moe.situ: launch once", "moe.situ"), ("kda.core: no decay", "kda.core")):
        a = by_title[title]
        assert a.target == target, (title, a.target)
        brief = (repo / "runs" / "attempts" / str(a.number) / "brief.md").read_text()
        assert f"make `{target}` faster" in brief


def test_main_moved_once_and_carries_the_verdict(replay_run):
    repo, ctx, _ = replay_run
    merged = [a for a in ctx.ledger.attempts() if a.state == "merged"]
    assert len(merged) == 1
    assert ctx.repo.main_sha() == merged[0].commit_sha
    note = json.loads(ctx.repo.note(merged[0].commit_sha))
    assert note["state"] == "merged" and note["accuracy"].startswith("PASS")
    # main's score: its A-side baseline before the merge, then the merged commit's
    shas = [s.sha for s in ctx.ledger.scores()]
    assert shas[0] == merged[0].base_sha and merged[0].commit_sha in shas, shas
    assert not any(p.name.startswith("attempt-") for p in (repo / "runs" / "worktrees").iterdir())


def test_journey_names_every_result(replay_run):
    _, ctx, _ = replay_run
    md = markdown(ctx.ledger.attempts(), ctx.ledger.phases(), scores=ctx.ledger.scores())
    for text in ("merged", "abandoned: slower", "abandoned: accuracy", "abandoned: scope",
                 "abandoned: conflict", "crashed"):
        assert text in md, md
    assert all(result(a) for a in ctx.ledger.attempts())


def test_tuner_pointed_at_the_slow_setting_has_its_commit_judged_faster_and_merged(tmp_path):
    """The tuner end to end in the loop: briefed on the profile's top target, it commits one
    change and the loop's real gates judge it faster and merge it. The tuner is pointed at the
    slow setting (``agent.tunables``, as the demo does): which of moe.situ's tunables it tries
    first is a seeded draw over every tunable of the tree (tests/harness/test_agents.py tests
    that order), so any kernel that declares a tunable would otherwise change this test's first
    attempt (c9c5684's experts tunables made it moe.situ.block, within noise)."""
    repo = make_repo(tmp_path, {**LIGHT, "agent.backend": "tuner", "loop.concurrency": 1,
                                "agent.tunables": ["moe.situ.passes", "*"]})
    slow_base(repo)
    ctx, settings = context(repo)
    orch = Orchestrator(ctx, settings.data)
    orch.tick(wait_for_agents=60)
    orch.tick(spawn=False)
    merged = [a for a in ctx.ledger.attempts() if a.state == "merged"]
    assert merged and merged[0].title == f"tune: moe.situ.passes {BASE_PASSES} -> 1", \
        [(a.title, a.state, a.reason) for a in ctx.ledger.attempts()]


def test_kill_during_a_gate_resumes_without_loss_or_duplicate(tmp_path):
    repo = make_repo(tmp_path, LIGHT)
    r = git.Repo(repo)
    r.git.checkout("-q", "-b", "cand")
    p = repo / "kernels/k31/kda/core.py"
    p.write_text(p.read_text().replace("s = s * decay[:, None, :]", "s = s", 1))
    r.git.commit("-qam", "kda.core: no decay")
    r.git.checkout("-q", "main")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "--repo", str(repo), "try", "cand"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    tap = repo / "runs" / "tap"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (tap.exists() and any(tap.iterdir())):
        time.sleep(0.5)
    time.sleep(3)  # inside side A's recording
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    ctx, settings = context(repo)
    before = ctx.ledger.attempts()
    assert len(before) == 1 and before[0].state == "judging"
    orch = Orchestrator(ctx, settings.data)
    assert orch.resume().requeued == [before[0].number]
    orch.tick(spawn=False)
    after = ctx.ledger.attempts()
    assert len(after) == 1 and after[0].state == "abandoned" and after[0].reason == "accuracy"
    kinds = [e.kind for e in ctx.ledger.events(after[0].number)]
    assert kinds.count("transition") >= 3  # judging -> queued -> judging -> abandoned
    assert ctx.ledger.integrity() == "ok"
