"""``kern bench``, ``kern test`` and ``kern profile`` with each side as W = 2 rank processes over
gloo (CPU interpreter, small model: mechanics only), on a temporary repository holding this
tree on ``main`` and one candidate whose ranks disagree.

Fast: the profile's routing of the collectives. Slow (each spawns rank processes): the scorer
reports slowest-rank times; main against itself passes bit-identical on every rank; the
2-rank step against the 1-rank step of the same model passes on its logits with no flip; a
candidate whose ranks end with different replicated bytes fails both gates, named; the
profile lists every collective as a row of its own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gates.rules import ranks
from gates.side.profile import COLLECTIVES, Collectives, Omit, OpClock
from tests.gates.candidates import candidate, make_repo

ROOT = Path(__file__).resolve().parents[2]
LIGHT = {"profiles.cpu.buckets": [2], "profiles.cpu.weights": [1], "profiles.cpu.replays": 3,
         "profiles.cpu.test_rows": [3, 1]}
# rank r adds r to the top value it keeps: rank 0's bytes are main's, rank 1's are not
DISAGREE = [("kernels/k31/collectives.py", "        top_val.copy_(v)\n",
             "        top_val.copy_(v + self.rank)  # each rank keeps its own top value\n")]

# rank r adds r to its top value on every third step only: the ranks part ways on some timed
# replays and agree again before a visit ends (each visit's last replay is not a third call)
SOMETIMES = [("kernels/k31/collectives.py", "        top_val.copy_(v)\n",
              "        self._n = getattr(self, '_n', 0) + 1\n"
              "        top_val.copy_(v + (self.rank if self._n % 3 == 0 else 0))\n")]


class _Comm:
    world = 2

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if name in COLLECTIVES or name == "gather_shares":
            return lambda *a: self.calls.append(name)
        raise AttributeError(name)


def test_the_profile_times_each_collective_as_its_own_row_and_can_leave_one_out():
    comm = _Comm()
    clock = OpClock(None, torch.device("cpu"), costs=False)
    routed = Collectives(comm, clock)
    assert routed.world == 2
    for name in COLLECTIVES:
        getattr(routed, name)(torch.zeros(1))
    routed.all_reduce(torch.zeros(1))
    routed.gather_shares(torch.zeros(1))  # not a step operation: passed through, not timed
    assert comm.calls == [*COLLECTIVES, "all_reduce", "gather_shares"]
    table = clock.table()
    assert set(table) == {f"collectives.{n}" for n in COLLECTIVES}
    assert table["collectives.all_reduce"]["calls"] == 2
    assert table["collectives.argmax"]["modules"] == ["kernels.k31.collectives"]
    omit = Omit("collectives.merge_attention")
    omit.active = True
    comm.calls.clear()
    for name in COLLECTIVES:
        getattr(Collectives(comm, omit), name)()
    assert comm.calls == [n for n in COLLECTIVES if n != "merge_attention"]


# ------------------------------------------------------------------ end to end (slow)
@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = make_repo(tmp_path_factory.mktemp("ranks"), LIGHT)
    return r, candidate(r, "disagree", DISAGREE), candidate(r, "disagree-sometimes", SOMETIMES)


def _settings(repo):
    from harness.settings import load

    return load(repo / "kern.yaml").resolve(torch.cuda.is_available())


def _bench(repo, rev, base=None):
    from gates.scorer import run_bench
    from harness.pipeline import bench_request
    from harness.terminal import scorer_report

    res = run_bench(bench_request(_settings(repo), repo, rev, base, repo / "runs", False,
                                  world=2, layout="tp2"), progress=lambda m: None).report
    return res, scorer_report(res)


def _test(repo, rev, base_world=None):
    from gates.accuracy import run_test
    from harness.pipeline import accuracy_request
    from harness.terminal import accuracy_report

    res = run_test(accuracy_request(_settings(repo), repo, rev, "main", repo / "runs", False,
                                    world=2, layout="tp2", base_world=base_world,
                                    base_layout="tp1" if base_world else None)).report
    return res, accuracy_report(res)


@pytest.mark.slow
def test_bench_over_two_ranks_reports_the_slowest_rank_per_replay(repo):
    res, lines = _bench(repo[0], "main")
    assert res["outcome"] == "ok", res.get("error")
    assert res["ranks"] == {**res["ranks"], "world": 2, "layout": "tp2", "backend": "gloo",
                            "emulated": False}
    per_rank = res["rank_samples"]["B"][2]
    assert len(per_rank) == 2 and all(len(t) == 3 for t in per_rank)
    assert res["samples"]["B"][2] == ranks.slowest_per_replay(per_rank)
    assert len(res["rank_medians"]["B"][2]) == 2
    assert "2 processes per side (gloo)" in lines[2] and " ranks " in lines[3], lines
    assert res["analysis"]["sides"]["B"]["graph_matches_eager"]
    assert not res["analysis"]["sides"]["B"]["failed_checks"]


@pytest.mark.slow
@pytest.mark.parametrize("which", ["always", "on some replays"])
def test_bench_fails_a_candidate_whose_ranks_disagree_and_names_it(repo, which):
    r, always, sometimes = repo
    sha = always if which == "always" else sometimes
    res, lines = _bench(r, sha, "main")
    assert res["outcome"] == "ranks disagree", lines
    assert f"the candidate {sha[:12]} (side B) is not deterministic across ranks" in res["error"]
    assert lines[-1].startswith("FAILED")


@pytest.mark.slow
def test_main_against_itself_over_two_ranks_passes_bit_identical(repo):
    res, lines = _test(repo[0], "main")
    assert res["verdict"] == "PASS bit-identical", lines
    rk = res["evidence"]["ranks"]
    assert rk["a"]["world"] == rk["b"]["world"] == 2 and not rk["a_disagree"] and not rk["b_disagree"]
    assert any("every rank identical at every step" in ln for ln in lines)


@pytest.mark.slow
def test_the_two_rank_step_matches_the_one_rank_step_with_no_flip(repo):
    res, lines = _test(repo[0], "main", base_world=1)
    assert res["verdict"].startswith("PASS"), lines
    lg = res["evidence"]["logits"]
    assert lg["flips_confident"] == lg["flips_near_tie"] == 0 and not lg["missing"]
    assert lg["rows"] == sum(res["spec"]["rows"]) * res["spec"]["steps"]
    assert res["evidence"]["cross_layout"] and res["evidence"]["tap"]["compared"] is False
    assert not res["evidence"]["ranks"]["b_disagree"]


@pytest.mark.slow
def test_a_candidate_whose_ranks_disagree_fails_the_gate(repo):
    r, sha, _ = repo
    res, lines = _test(r, sha)
    assert res["verdict"] == "FAIL", lines
    assert "candidate's 2 ranks ended with different replicated bytes" in res["reasons"][0]
    # rank 0 alone is main's bytes: only the comparison of ranks catches it
    assert res["evidence"]["tap"]["differ_raw"] == 0


@pytest.mark.slow
def test_profile_over_two_ranks_lists_every_collective(repo, tmp_path):
    out = tmp_path / "profile.json"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "--repo", str(repo[0]), "profile", "main", "--gpus",
         "2", "--rows", "1", "--no-free", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 0 of 2 processes (gloo)" in proc.stdout
    ops = json.loads(out.read_text())["profile"]["ops"]
    for name in COLLECTIVES:
        row = ops[f"collectives.{name}"]
        assert row["ms"] > 0 and row["calls"] > 0 and row["floor_ms"] is None, name
    assert "moe.experts" in ops
