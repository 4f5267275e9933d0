"""The multi-process launcher (gates/launch/ranks.py): its decisions directly; its teardown on small
stand-in processes (a rank that fails takes the others down, process groups included; a time
limit ends all); and, slow, ``kern step --gpus 2 --emulate 4`` end to end over gloo."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from gates.launch import ranks as launch_ranks
from gates.rules import ranks

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
    ended = launch_ranks.run_all([[sys.executable, "-c", waiter], [sys.executable, "-c", failer]],
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
    ended = launch_ranks.run_all([sleep, sleep], [dict(os.environ)] * 2,
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


# ------------------------------------------------------------------ scorer and gate over ranks
def test_a_replay_takes_its_slowest_rank_then_the_median_over_replays():
    # rank 0 is slow on replay 0, rank 1 on replays 1 and 2: no rank's own median is the TPOT
    assert ranks.slowest_per_replay([[5.0, 1.0, 1.0], [1.0, 4.0, 3.0]]) == [5.0, 4.0, 3.0]
    res = ranks.combine([_rank_result(1.0, [5.0, 1.0, 1.0]), _rank_result(3.0, [1.0, 4.0, 3.0])],
                               "tp2", "gloo")
    assert res["buckets"]["4"]["median_ms"] == 4.0 and res["buckets"]["4"]["slowest_rank"] == 1
    with pytest.raises(ValueError):
        ranks.slowest_per_replay([[1.0, 2.0], [1.0]])


def _time_reply(times, sha, tampered=(), repeated=0):
    return {"ok": True, "times": times, "replicated_sha": sha,
            "checks": {"replays": len(times), "unwritten_or_invalid": 0, "nonfinite": 0,
                       "repeated_outputs": repeated, "threads_left_running": 0,
                       "tampered": list(tampered)}}


def test_merged_time_replies_sum_checks_and_compare_replicated_bytes():
    m = ranks.merge_replies("time", [_time_reply([2.0, 1.0], "x"),
                                            _time_reply([1.0, 3.0], "x", tampered=["clock replaced"],
                                                        repeated=1)])
    assert m["times"] == [2.0, 3.0] and m["rank_times"] == [[2.0, 1.0], [1.0, 3.0]]
    assert m["checks"]["repeated_outputs"] == 1 and m["checks"]["replays"] == 2
    assert m["checks"]["tampered"] == ["rank 1: clock replaced"] and m["ranks_agree"]
    assert not ranks.merge_replies("time", [_time_reply([1.0], "x"),
                                                   _time_reply([1.0], "y")])["ranks_agree"]


def test_merged_verify_holds_only_on_every_rank_and_keeps_the_worst_op():
    op = lambda rel, nan=0: {"rel_rms": rel, "max_ulp": 1.0, "nan": nan, "calls": 1, "at": "s"}  # noqa: E731
    v = ranks.merge_replies("verify", [
        {"ok": True, "equal": True, "max_abs_diff": 0.0, "nan": 0, "ops": {"a": op(1e-4), "b": op(0.3)}},
        {"ok": True, "equal": False, "max_abs_diff": 0.5, "nan": 2, "ops": {"a": op(0.2, nan=1), "b": op(1e-3)}}])
    assert not v["equal"] and v["max_abs_diff"] == 0.5 and v["nan"] == 2
    assert v["ops"]["a"]["rel_rms"] == 0.2 and v["ops"]["a"]["nan"] == 1 and v["ops"]["b"]["rel_rms"] == 0.3
    p = ranks.merge_replies("prepare", [{"build_s": 1.0, "capture_s": 4.0, "environment": {"r": 0}},
                                               {"build_s": 2.0, "capture_s": 3.0, "environment": {"r": 1}}])
    assert (p["build_s"], p["capture_s"], p["environment"]) == (2.0, 4.0, {"r": 0})


def test_tap_digests_name_the_steps_where_ranks_disagree():
    assert ranks.disagreements([{"4:0": "a", "4:1": "b"}, {"4:0": "a", "4:1": "b"}]) == []
    assert ranks.disagreements([{"4:0": "a", "4:1": "b"}, {"4:0": "a", "4:1": "c"}]) == ["4:1"]
    assert ranks.disagreements([{"4:0": "a"}, {}]) == ["4:0"]  # a rank that recorded nothing
    merged = ranks.merge_digests([{"role": "replay", "rank_digests": {"1:0": "a"}, "pass": 0},
                                         {"role": "replay", "rank_digests": {"1:0": "b"}, "pass": 1}],
                                 "tp2", "gloo")
    assert merged["pass"] == 0 and merged["rank_disagreements"] == ["1:0"]
    assert merged["ranks"]["world"] == 2
    with pytest.raises(ValueError):  # no digest must never read as agreement
        ranks.merge_digests([{"role": "replay"}, {"role": "replay"}], "tp2", "gloo")


def test_side_ranks_and_base_ranks_say_what_the_user_must_change():
    assert ranks.side_ranks(None, None, cuda=False, devices=0) == (1, None)
    assert ranks.side_ranks(2, 8, cuda=True, devices=2) == (2, "tp8")
    with pytest.raises(ranks.RanksError, match="needs 4 GPUs"):
        ranks.side_ranks(4, None, cuda=True, devices=2)
    assert ranks.base_ranks(None, 2, None) == (None, None)
    assert ranks.base_ranks(1, 2, None) == (1, "tp1")
    with pytest.raises(ranks.RanksError, match="drop --emulate"):
        ranks.base_ranks(1, 2, 8)
    with pytest.raises(ranks.RanksError, match="needs --gpus"):
        ranks.base_ranks(1, None, None)
    # the layout must divide the profile's model, said before any process starts
    assert ranks.side_ranks(4, None, cuda=False, devices=0, model="small") == (4, "tp4")
    assert ranks.side_ranks(2, 8, cuda=True, devices=2, model="full") == (2, "tp8")
    with pytest.raises(ranks.RanksError, match=r"small model does not split into layout tp8 .*"
                                               r"kda_heads=4 does not split into 8 parts"):
        ranks.side_ranks(8, None, cuda=False, devices=0, model="small")
    with pytest.raises(ranks.RanksError, match="small model does not split into layout tp8"):
        ranks.side_ranks(2, 8, cuda=False, devices=0, model="small")
    assert ranks.base_ranks(4, 2, None, model="small") == (4, "tp4")


def test_rank_groups_never_share_a_model_and_their_sides_alternate():
    from gates.scorer import processes

    assert processes(cuda=True, same_model=True, world=1, forced=None, sides=2) == (True, False)
    assert processes(cuda=True, same_model=False, world=1, forced=None, sides=2) == (False, True)
    assert processes(cuda=True, same_model=True, world=2, forced=None, sides=2) == (False, True)
    assert processes(cuda=False, same_model=True, world=2, forced=None, sides=2) == (False, True)
    assert processes(cuda=False, same_model=True, world=2, forced=False, sides=2) == (False, False)
    assert processes(cuda=False, same_model=True, world=2, forced=None, sides=1) == (False, False)
