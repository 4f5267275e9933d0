"""The candidate's replay starts beside main's record side (CPU, small config, Triton
interpreter): its process starts, imports its tree and builds its model while main records,
and gets its hidden inputs and main's recording only once main's side said RECORDED. Verdicts
are those of a replay started after main's recording: main against itself bit-identical; a
candidate whose tree fails at import FAILs naming its side, main's recording made all the
same; a base that fails to record is INCONCLUSIVE and the replay beside it is ended, unjudged.
The gate's phases still add up to its wall (what the replay did before its release is kept
apart as ``beside``)."""
from __future__ import annotations

import pytest
import torch

from gates.accuracy import run_test
from gates.rules.phases import JudgmentTimes
from harness.pipeline import accuracy_request
from harness.settings import load
from tests.gates.candidates import ONE_ROW_TAP, candidate, make_repo, reasons, tensors_left

pytestmark = pytest.mark.slow

SITU = "kernels/k31/moe/situ.py"
SETTINGS = ONE_ROW_TAP


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    repo = make_repo(tmp_path_factory.mktemp("beside"), SETTINGS)
    broken_import = candidate(repo, "import-fails", [
        ("kernels/k31/__init__.py", "", "raise RuntimeError('tree refuses to import')\n")])
    broken_main = candidate(repo, "situ-raises", [
        (SITU, "    rows, inter = out.shape\n",
         "    rows, inter = out.shape\n    raise RuntimeError('situ kernel refused')\n")])
    cuda = torch.cuda.is_available()
    cfg = load(repo / "kern.yaml").resolve(cuda)

    def judge(rev, base):
        return run_test(accuracy_request(cfg, repo, rev, base, repo / "runs", cuda)).report

    # one at a time: each shows its own sides' order on a machine no other judgment loads
    return {"same": judge("main", "main"), "import": judge(broken_import, "main"),
            "base fails": judge("main", broken_main)}


def _sum(spans) -> float:
    return sum(s["seconds"] for s in spans)


def test_main_against_itself_is_bit_identical_with_the_replay_built_beside_the_recording(judged):
    r = judged["same"]
    assert r["verdict"] == "PASS bit-identical", reasons(r)
    t = r["timeline"]
    # the replay's process started before main's side said RECORDED, and was released after
    assert t["a_started"] <= t["b_started"] < t["a_recorded"] <= t["b_released"], t
    # its model was built before its hand-over, and it waited there for main's recording
    beside = {(s["part"], s["phase"]) for s in r["beside"]}
    assert {("B replay", "start"), ("B replay", "build")} <= beside, r["beside"]
    assert not [s for s in r["phases"] if (s["part"], s["phase"]) == ("B replay", "build")]
    assert {("A record", "tap"), ("B replay", "tap")} <= {(s["part"], s["phase"]) for s in r["phases"]}
    # the path's spans are the gate's wall; what ran beside is within main's recording
    assert abs(_sum(r["phases"]) - r["wall_s"]) < 1e-6, r["phases"]
    assert _sum(r["beside"]) <= t["b_released"] - t["b_started"] + 1.0, (r["beside"], t)
    # the judgment's times carry it: main's recording covered its start and build up to its
    # RECORDED; what ran after it held up the release (its process's exit, counted beside, aside)
    (b,) = JudgmentTimes.of(r, None).beside
    assert (b.part, b.of, b.started_s, b.of_done_s) == ("B replay", "A record", t["b_started"], t["a_recorded"])
    assert abs(b.seconds - _sum(r["beside"])) < 1e-6 and abs(b.overlap_s + b.after_s - b.seconds) < 1e-6
    assert 0.0 < b.overlap_s <= t["a_recorded"] - t["b_started"] + 1e-6, (b, t)
    assert b.after_s <= t["b_released"] - t["a_recorded"] + 1.0, (b, t)
    assert tensors_left([r]) == []


def test_a_tree_that_fails_at_import_fails_and_main_still_records(judged):
    r = judged["import"]
    ev = r["evidence"]
    assert r["verdict"] == "FAIL" and ev["outcome_a"] == "ok" and ev["outcome_b"] == "error", reasons(r)
    assert "candidate side ended: error" in r["reasons"]
    assert r["timeline"]["b_released"] is None and r["timeline"]["a_recorded"] is not None
    words = {w["side"]: w for w in r["last_words"]}
    assert list(words) == ["B replay"] and "tree refuses to import" in "\n".join(words["B replay"]["lines"])
    assert abs(_sum(r["phases"]) - r["wall_s"]) < 1e-6, r["phases"]


def test_a_base_that_fails_to_record_is_inconclusive_and_the_replay_beside_it_ends(judged):
    r = judged["base fails"]
    ev = r["evidence"]
    assert r["verdict"] == "INCONCLUSIVE" and ev["outcome_b"] == "not run", reasons(r)
    assert ev["outcome_a"] not in ("ok", "not run") and "base side did not finish" in reasons(r)
    t = r["timeline"]
    assert t["b_started"] is not None and t["a_recorded"] is None and t["b_released"] is None, t
    assert [w["side"] for w in r["last_words"]] == ["A record"]
    # the replay ran only beside main's side, and was ended with it
    assert r["beside"] and {s["part"] for s in r["beside"]} == {"B replay"}
    assert not [s for s in r["phases"] if s["part"] == "B replay"]
    (b,) = JudgmentTimes.of(r, None).beside  # ended with main's side: all of it beside main's
    assert b.of_done_s is None and b.released_s is None and (b.overlap_s, b.after_s) == (b.seconds, 0.0)
    assert r["b_log_tail"] == "" and tensors_left([r]) == []


def test_with_replay_beside_off_the_replay_starts_once_main_has_recorded(tmp_path):
    """kern.yaml's test.replay_beside: false (a device that holds one side's model only): the
    replay's process starts after main's side said RECORDED; the verdict is the same."""
    repo = make_repo(tmp_path, {**SETTINGS, "test.replay_beside": False})
    cuda = torch.cuda.is_available()
    cfg = load(repo / "kern.yaml").resolve(cuda)
    assert cfg.test.replay_beside is False
    r = run_test(accuracy_request(cfg, repo, "main", "main", repo / "runs", cuda)).report
    assert r["verdict"] == "PASS bit-identical", reasons(r)
    t = r["timeline"]
    assert t["a_started"] <= t["a_recorded"] <= t["b_started"] <= t["b_released"], t
    assert r["beside"] == [] and abs(_sum(r["phases"]) - r["wall_s"]) < 1e-6, r["phases"]
    assert JudgmentTimes.of(r, None).beside == ()
