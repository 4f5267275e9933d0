"""farm.kind ray end to end on the CPU (slow): ``kern loop --ticks 3`` starts a local Ray
instance with two worker processes (farm.slots lists two CPU slots), judges two attempts of
the small config at once as Ray tasks, and records both rows, each naming the slot (node and
worker) that judged it. The test kills one worker mid-judgment: that attempt is recorded
``crashed`` with reason ``node lost`` and its commit judged again as a new attempt, nothing
lost, nothing merged twice.

Light on purpose (the slow suite shares two cores): both patches fail the accuracy gate, so
no judgment runs the scorer; the settings are loop_replay.py's LIGHT.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import ledger as L
from tests.gates.candidates import ROOT, make_repo
from tests.harness.loop_replay import LIGHT, patch

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray", reason="farm.kind ray needs the farm extra (pip install 'kern-loop[farm]')")


def test_two_attempts_judged_at_once_on_ray_and_a_lost_worker_is_judged_again(tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    repo = make_repo(tmp_path, {**LIGHT, "agent.backend": "replay", "agent.replay_dir": str(patches),
                                "loop.concurrency": 2, "test.timeout_s": 300,
                                "farm.kind": "ray", "farm.address": "", "farm.slots": ["cpu0", "cpu1"]})
    patch(repo, "00-decay.patch", [("kernels/k31/kda/core.py", "s = s * decay[:, None, :]", "s = s")],
          patches, "kda.core: no decay")
    patch(repo, "01-beta.patch", [("kernels/k31/kda/core.py", "s = s * decay[:, None, :]",
                                   "s = s * decay[:, None, :] * 0.5")], patches, "kda.core: half the state")
    farm = tmp_path / "farm"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update({"PYTHONPATH": str(ROOT), "KERN_FARM_DIR": str(farm)})
    with open(tmp_path / "loop.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "--repo", str(repo), "loop",
                                 "--ticks", "3", "--every", "1s", "--wait-agents", "120", "--no-live"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        # both judgments under way at once: two workers, each with its pid file
        deadline = time.monotonic() + 400
        pids = {}
        while time.monotonic() < deadline and len(pids) < 2 and proc.poll() is None:
            pids = {p.parent.name: int(p.read_text()) for p in farm.glob("*/worker.pid")}
            time.sleep(0.5)
        assert len(pids) == 2, (tmp_path / "loop.log").read_text()[-3000:]
        assert len(set(pids.values())) == 2  # two worker processes
        victim_dir = max(pids, key=lambda name: int(name.split("-")[0]))  # attempt 2's
        time.sleep(5)  # inside its gate
        with L.Ledger(L.default_path(repo)) as led:
            assert [a.state for a in led.attempts()] == [L.JUDGING, L.JUDGING]  # both at once
        os.kill(pids[victim_dir], signal.SIGKILL)
        assert proc.wait(timeout=900) == 0, (tmp_path / "loop.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    with L.Ledger(L.default_path(repo)) as led:
        rows = {a.number: a for a in led.attempts()}
        log_tail = (tmp_path / "loop.log").read_text()[-3000:]
        # tick 2 also briefs a third agent (loop.concurrency 2, one attempt re-queued), which
        # finds no patch left to replay
        assert sorted(rows) == [1, 2, 3, 4], log_tail
        assert rows[4].state == L.NOT_DONE and rows[4].rerun_of is None
        one, two, again = rows[1], rows[2], rows[3]
        assert (one.state, one.reason) == (L.ABANDONED, L.ACCURACY), log_tail
        assert two.state == L.CRASHED and two.reason.startswith("node lost: "), (two.reason, log_tail)
        # the re-run: the same commit, judged to its end on a live worker
        assert again.rerun_of == 2 and again.commit_sha == two.commit_sha
        assert (again.state, again.reason) == (L.ABANDONED, L.ACCURACY), log_tail
        host = os.uname().nodename
        assert one.host == again.host == host
        assert one.slot.startswith("cpu-pid") and again.slot.startswith("cpu-pid")
        assert one.slot == f"cpu-pid{pids[min(pids, key=lambda n: int(n.split('-')[0]))]}"
        assert not led.attempts(states=[L.MERGED]) and led.integrity() == "ok"
        assert all(a.state in L.FINAL for a in rows.values())  # nothing lost in flight
    # the killed worker's gate processes died with it (nothing of its judgment still runs)
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(farm / victim_dir).encode() in cmdline.read_bytes():
                left.append(cmdline.parent.name)
        except OSError:
            pass
    assert not left, f"processes of the lost judgment still running: {left}"
