"""The multi-process launcher (gates/ranks.py): its decisions directly; its teardown on small
stand-in processes (a rank that fails takes the others down, process groups included; a time
limit ends all); and, slow, ``kern step --gpus 2 --emulate 4`` end to end over gloo."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from gates import ranks

ROOT = Path(__file__).resolve().parents[2]


def test_layout_name_splits_over_the_processes_or_emulates_a_larger_layout():
    assert ranks.layout_name(1) == "tp1"
    assert ranks.layout_name(2) == "tp2"
    assert ranks.layout_name(2, 8) == "tp8"
    assert ranks.layout_name(8, 8) == "tp8"
    for gpus, emulate in ((3, None), (4, 2), (2, 6), (0, None)):
        with pytest.raises(ranks.RanksError):
            ranks.layout_name(gpus, emulate)


def test_rank_env_carries_torchrun_variables():
    env = ranks.rank_env({"PATH": "/bin"}, 1, 4, 29511)
    assert env == {"PATH": "/bin", "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}


def _rank_result(median, times, replicated="aa", logits="bb", nan=0):
    return {"environment": {"device": "cpu"},
            "buckets": {"4": {"median_ms": median, "times_ms": times, "nan_or_inf_logits": nan,
                              "replicated_sha": replicated, "logits_sha": logits}}}


def test_combine_takes_the_slowest_rank_and_checks_that_ranks_agree():
    res = ranks.combine([_rank_result(2.0, [2.0]), _rank_result(3.0, [3.0], nan=1)], "tp8", "gloo")
    b = res["buckets"]["4"]
    assert (b["median_ms"], b["times_ms"], b["slowest_rank"]) == (3.0, [3.0], 1)
    assert b["rank_medians_ms"] == [2.0, 3.0] and b["nan_or_inf_logits"] == 1
    assert b["ranks_agree"] is True
    assert res["ranks"]["emulated"] is True and "8-rank layout" in res["ranks"]["note"]
    split = ranks.combine([_rank_result(1.0, [1.0]), _rank_result(1.0, [1.0], logits="cc")],
                          "tp2", "gloo")
    assert split["buckets"]["4"]["ranks_agree"] is False
    assert split["ranks"]["emulated"] is False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_a_failing_rank_ends_the_others_and_their_children(tmp_path):
    pids = tmp_path / "pids"
    # rank 0 waits with a child of its own; rank 1 fails once rank 0 has written its pids
    waiter = ("import os, subprocess, sys, time\n"
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
              f"open({str(pids)!r} + '.tmp', 'w').write(f'{{os.getpid()}} {{c.pid}}')\n"
              f"os.replace({str(pids)!r} + '.tmp', {str(pids)!r})\n"
              "time.sleep(120)\n")
    failer = ("import os, sys, time\n"
              f"while not os.path.exists({str(pids)!r}): time.sleep(0.05)\n"
              "print('rank 1: out of luck'); sys.exit(3)\n")
    logs = [tmp_path / "r0.log", tmp_path / "r1.log"]
    t0 = time.monotonic()
    ended = ranks.run_all([[sys.executable, "-c", waiter], [sys.executable, "-c", failer]],
                          [dict(os.environ)] * 2, logs, timeout_s=60)
    assert time.monotonic() - t0 < 30
    assert (ended[1].returncode, ended[1].killed) == (3, False)
    assert ended[0].killed and not ended[0].timed_out and ended[0].order > ended[1].order
    assert "out of luck" in logs[1].read_text()
    deadline = time.monotonic() + 5
    while any(_alive(int(p)) for p in pids.read_text().split()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(int(p)) for p in pids.read_text().split())


def test_the_time_limit_ends_every_rank(tmp_path):
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    t0 = time.monotonic()
    ended = ranks.run_all([sleep, sleep], [dict(os.environ)] * 2,
                          [tmp_path / "r0.log", tmp_path / "r1.log"], timeout_s=1.0)
    assert time.monotonic() - t0 < 20
    assert all(e.killed and e.timed_out for e in ended)


@pytest.mark.slow
def test_kern_step_runs_two_ranks_emulating_four(tmp_path):
    """Each of 2 gloo processes computes its share of the 4-rank layout (the small model does
    not split 8 ways); every rank ends with the same bytes."""
    import subprocess

    out = tmp_path / "step.json"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "--repo", str(ROOT), "step", "--gpus", "2",
         "--emulate", "4", "--rows", "1", "--replays", "1", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ranks 2 (gloo), layout tp4" in proc.stdout and "ranks agree yes" in proc.stdout
    res = json.loads(out.read_text())
    assert res["ranks"]["emulated"] and res["ranks"]["world"] == 2
    b = res["buckets"]["1"]
    assert b["ranks_agree"] and b["nan_or_inf_logits"] == 0 and len(b["rank_medians_ms"]) == 2
