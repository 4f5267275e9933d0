"""The whole loop on a temporary repository with the small tree (CPU, real gates).

Replay patches must end merged / abandoned for accuracy / abandoned slower / rejected for
scope / crashed / conflicted after main moved; the tuner must find a better setting; a
``kern try`` killed with SIGKILL during a gate resumes with no row lost or duplicated.
The base tree of the repository carries deliberate extra work (SiTU launched 40 times, a
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

from harness.journey import markdown, result
from harness.orchestrator import Orchestrator
from tests.gates.candidates import ROOT, context, make_repo

# slow: run serially after the unit tests (.ci/run), so the A/B timings of the bench and
# loop tests never share the two cores with other interpreter processes
pytestmark = pytest.mark.slow
SITU = "kernels/k31/moe/situ.py"
SITU_TUNABLES = "kernels/k31/moe/tunables.py"
LAUNCH = "    _situ_kernel[(cdiv(rows, block_r), cdiv(inter, block))](\n"


def slow_base(repo: Path) -> None:
    """Commit a base whose SiTU launches ``moe.situ.passes`` (40) times: work to find."""
    p = repo / SITU
    s = p.read_text()
    assert LAUNCH in s, "update the test: moe/situ.py's launch line changed"
    s = s.replace(LAUNCH, "    for _ in range(tunables.get(\"moe.situ.passes\")):  # repeated work\n     "
                  + LAUNCH.lstrip(" "))
    p.write_text(s)
    t = repo / SITU_TUNABLES
    ts = t.read_text()
    assert "TUNABLES = {" in ts
    t.write_text(ts.replace("TUNABLES = {", "TUNABLES = {\n    \"moe.situ.passes\": (40, (1, 40)),", 1))
    r = git.Repo(repo)
    r.git.add("-A")
    r.git.commit("-m", "base with repeated SiTU work")


def patch(repo: Path, name: str, edits: list, folder: Path, subject: str) -> None:
    """Write a plain diff (``subject`` on its first line) made from ``edits`` on main."""
    for path, old, new in edits:
        p = repo / path
        s = p.read_text()
        assert old in s, f"{name}: {path} lacks {old!r}"
        p.write_text(s.replace(old, new, 1))
    diff = git.Repo(repo).git.diff()
    git.Repo(repo).git.checkout("--", ".")
    (folder / name).write_text(f"{subject}\n{diff}\n")


# loop mechanics, not gate coverage (tests/gates has the awkward sizes): one small bucket, but
# two rounds of three replays, so a load swing on a shared CI machine cannot make the A-vs-A
# band swallow a many-fold difference. The tap runs the test rows and every bucket: [1, 2].
LIGHT = {"profiles.cpu.test_rows": [1], "profiles.cpu.buckets": [2], "profiles.cpu.weights": [1],
         "profiles.cpu.rounds": 2, "profiles.cpu.replays": 3}


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
          patches, "moe.situ: launch once")
    patch(repo, "01-conflict.patch", [(SITU, loop_line, "    for _ in range(2):  # twice\n")],
          patches, "moe.situ: launch twice")
    patch(repo, "02-slower.patch", [(SITU, loop_line, "    for _ in range(120):  # more work\n")],
          patches, "moe.situ: launch 120 times")
    patch(repo, "03-accuracy.patch", [("kernels/k31/kda/core.py", "s = s * decay[:, None, :]", "s = s")],
          patches, "kda.core: no decay")
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
    assert outcomes["moe.situ: launch once"] == ("merged", None), outcomes
    assert outcomes["moe.situ: launch twice"] == ("abandoned", "conflict"), outcomes
    assert outcomes["moe.situ: launch 120 times"] == ("abandoned", "slower"), outcomes
    assert outcomes["kda.core: no decay"] == ("abandoned", "accuracy"), outcomes
    assert outcomes["loosen the gate"] == ("abandoned", "scope"), outcomes
    crashed = [a for a in ctx.ledger.attempts() if a.state == "crashed"]
    assert len(crashed) == 1 and "fell over" in crashed[0].reason


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


def test_tuner_finds_the_better_setting(tmp_path):
    repo = make_repo(tmp_path, {**LIGHT, "agent.backend": "tuner", "loop.concurrency": 1})
    slow_base(repo)
    ctx, settings = context(repo)
    orch = Orchestrator(ctx, settings.data)
    orch.tick(wait_for_agents=60)
    orch.tick(spawn=False)
    merged = [a for a in ctx.ledger.attempts() if a.state == "merged"]
    assert merged and merged[0].title == "tune: moe.situ.passes 40 -> 1", \
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
