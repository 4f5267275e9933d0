"""``kern bench REV --vs BASE`` on two revisions of a temporary repository (CPU interpreter:
mechanics only). A revision with added work is slower; an identical one is within noise and its
timed replays' outputs equal main's byte for byte (the comparison is sound: every replay starts
from the same state); work skipped only in the timed replays is judged from their outputs."""
import pytest
import torch

from gates.bench import BenchRequest, report_lines, run_bench
from harness.settings import load
from tests.gates.candidates import candidate, make_repo

# slow: run serially after the unit tests (.ci/run), so the A/B timings of the bench and
# loop tests never share the two cores with other interpreter processes
pytestmark = pytest.mark.slow
SITU = "kernels/k31/moe/situ.py"
LAUNCH = "    _situ_kernel[(cdiv(rows, block_r), cdiv(inter, block))](\n"
LIGHT = {"profiles.cpu.buckets": [2], "profiles.cpu.weights": [1], "profiles.cpu.replays": 3}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("bench"), LIGHT)


def _bench(repo, rev, alternate=None, accuracy=None):
    s = load(repo / "kern.yaml")
    return run_bench(BenchRequest(repo, rev, "main", s.data, s.profile(torch.cuda.is_available()),
                                  repo / "runs", torch.cuda.is_available(), alternate=alternate,
                                  accuracy=accuracy),
                     progress=lambda m: None)


def test_added_work_is_slower_and_guarded(repo):
    sha = candidate(repo, "slower", [(SITU, LAUNCH, "    for _ in range(60):  # added work\n     "
                                      + LAUNCH.lstrip(" "))])
    res = _bench(repo, sha)
    assert res["outcome"] == "ok", res.get("error")
    ab = res["analysis"]["ab"]
    assert ab["classification"] == "slower" and not ab["guard_ok"], report_lines(res)
    assert report_lines(res)[-1].startswith("delta +") and "slower" in report_lines(res)[-1]
    b = res["analysis"]["sides"]["B"]
    assert b["graph_matches_eager"] and not b["failed_checks"]


def test_identical_revisions_are_within_noise_in_alternating_processes(repo):
    """Sides that cannot share one model take turns: A | B B | A, one process alive at a time."""
    sha = candidate(repo, "same", [(SITU, "def moe_situ(", "# no instruction changed\ndef moe_situ(")])
    res = _bench(repo, sha, alternate=True)
    assert res["outcome"] == "ok", res.get("error")
    assert res["alternating"] and res["processes"] == {"A": 2, "B": 1}
    assert len(res["prepare"]["A"]) == 2 and set(res["verify"]) == {"A", "B"}
    assert "sides alternate" in report_lines(res)[1]
    assert res["analysis"]["ab"]["classification"] == "within noise", report_lines(res)
    assert res["cpu_note"] and "not GPU" in report_lines(res)[0].replace("never GPU", "not GPU")
    # two processes of A and one of B, each from a fresh start: every timed replay's outputs
    # and recurrent state equal main's on the same input set
    timed = res["timed"]
    assert set(timed) == {"2"} and timed["2"]["replays"] == 6, timed  # 2 visits x 3
    assert timed["2"]["first_raw_difference"] is None and timed["2"]["logits"]["identical"]
    assert any("equal main's byte for byte" in ln for ln in report_lines(res))
    assert not list((repo / "runs" / "bench").glob("*/timed-*"))  # GBs at full size: removed


TOPK = "kernels/k31/mla/topk.py"
TOPK_START = "    if rows == 0:\n        return\n    if platform.FEW_PROGRAMS:"


def test_work_skipped_only_in_the_timed_replays_is_judged_by_their_outputs(repo):
    """The scorer's context (96 tokens, 48 per rank) is longer than the accuracy gate's (80):
    a top-k that keeps the indices an earlier call left there is honest while the gate watches
    (PASS bit-identical) and skips its work in every timed replay."""
    from gates.accuracy import TestRequest, run_test

    sha = candidate(repo, "topk-scorer-only", [(TOPK, TOPK_START, TOPK_START.replace(
        "    if platform.FEW_PROGRAMS:",
        "    if int(ctx_len.max()) > 44 and idx.data_ptr() in _SEEN:  # the scorer's context:\n"
        "        return  # keep the indices an earlier call left\n"
        "    _SEEN.add(idx.data_ptr())\n    if platform.FEW_PROGRAMS:")),
        (TOPK, "def mla_topk(", "_SEEN = set()\n\n\ndef mla_topk(")])
    s = load(repo / "kern.yaml")
    test = run_test(TestRequest(repo, sha, "main", s.data, s.profile(False), repo / "runs", False))
    assert test["verdict"] == "PASS bit-identical", test["reasons"]  # the gate is fooled
    res = _bench(repo, sha, accuracy={"verdict": test["verdict"]})
    assert res["outcome"] == "ok", res.get("error")
    failed = res["analysis"]["sides"]["B"]["failed_checks"]
    timed = {c["check"]: c for c in failed}["timed_outputs_identical"]
    assert "although the accuracy gate saw identical ones" in timed["why"]
    assert "at 2 rows, timed replay 0" in timed["why"], timed["why"]
    # the reference check, run in the scorer's process at its context, sees it too
    assert {c["check"] for c in failed} == {"timed_outputs_identical", "ops_match_reference"}
