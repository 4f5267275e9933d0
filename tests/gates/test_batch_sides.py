"""Main recorded once for a batch of candidates (gates.accuracy.MainRecording; CPU, small config,
Triton interpreter): three candidates against one main with one shape (the same touched ops)
judged one after another on one hidden draw. Main's record side runs once, for the first; the
second's pass differs and is pinned on main's kept op calls, which the live side writes then;
the third is judged after that. Each verdict is the one its candidate gets judged alone on the
same draw, and once the batch is closed no tensor of the recording is left."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gates.accuracy import MainRecording, run_test
from gates.rules import hidden as draws
from harness.pipeline import accuracy_request
from harness.settings import load
from tests.gates.candidates import ONE_ROW_TAP, candidate, make_repo, reasons, tensors_left

pytestmark = pytest.mark.slow

CORE = "kernels/k31/kda/core.py"
SETTINGS = ONE_ROW_TAP


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    repo = make_repo(tmp_path_factory.mktemp("batch"), SETTINGS)
    shas = [candidate(repo, "comment", [(CORE, "def kda_core(", "# a comment\ndef kda_core(")]),
            candidate(repo, "dropped-decay", [(CORE, "s = s * decay[:, None, :]", "s = s  # decay dropped")]),
            candidate(repo, "comment-2", [(CORE, "def kda_core(", "# another comment\ndef kda_core(")])]
    cuda = torch.cuda.is_available()
    cfg = load(repo / "kern.yaml").resolve(cuda)
    drawn = draws.for_machine(cfg.machine, cfg.test)

    def request(sha):
        return accuracy_request(cfg, repo, sha, "main", repo / "runs", cuda, hidden=drawn)

    recording = MainRecording(drawn, repo / "runs")
    try:
        reports = [run_test(request(sha), recording=recording).report for sha in shas]
        held = sorted(p.name for p in Path(reports[0]["a_dir"]).rglob("*.pt"))
    finally:
        ended = recording.close(cfg.test.timeout_s)
    alone = run_test(request(shas[1])).report  # the differing one, on the same draw, alone
    return {"reports": reports, "held": held, "ended": ended, "alone": alone, "hidden": drawn}


def test_main_records_once_and_every_member_replays_against_it(batch):
    r1, r2, r3 = batch["reports"]
    assert len({r["a_dir"] for r in batch["reports"]}) == 1
    assert all(r["hidden"] == batch["hidden"].to_dict() for r in batch["reports"])
    # the first member's gate started main's side; the others found it recorded and waiting
    assert not r1["a_cached"] and r1["a_wall_s"] > 0 and r1["timeline"]["a_recorded"] is not None
    for r in (r2, r3):
        assert r["a_cached"] and r["a_wall_s"] == 0.0 and r["timeline"]["a_started"] is None, r["timeline"]
    assert batch["ended"] is not None and batch["ended"].ok  # it served the batch to its close
    # the first member's phases hold main's side up to its recording, and add up to the wall
    spans = {(s["part"], s["phase"]) for s in r1["phases"]}
    assert {("A record", "build"), ("A record", "tap"), ("B replay", "tap")} <= spans, r1["phases"]
    assert abs(sum(s["seconds"] for s in r1["phases"]) - r1["wall_s"]) < 1e-6, r1["phases"]
    assert not [s for s in r2["phases"] if s["part"] == "A record"]  # no side of main ran for it


def test_each_verdict_is_the_one_judged_alone(batch):
    r1, r2, r3 = batch["reports"]
    assert r1["verdict"] == r3["verdict"] == "PASS bit-identical", (reasons(r1), reasons(r3))
    alone = batch["alone"]
    assert r2["verdict"] == alone["verdict"] == "FAIL", reasons(r2)
    assert r2["reasons"] == alone["reasons"]
    # pinned on main's kept op calls, which the batch's live side wrote when this member asked
    assert r2["evidence"]["local"]["ops"], r2["evidence"]["local"]
    assert r2["evidence"]["local"] == alone["evidence"]["local"]
    assert not alone["a_cached"]  # the batch's recording was gone: judged alone it recorded again


def test_the_recording_lives_until_the_batch_is_closed(batch):
    assert "logits_a.pt" in batch["held"] and "kept_a.pt" in batch["held"]
    assert tensors_left(batch["reports"] + [batch["alone"]]) == []


@pytest.fixture(scope="module")
def hacked_batch(tmp_path_factory):
    """Two catalogue hacks and an honest edit, all of moe.situ alone (one shape), as one batch."""
    from tests.adversarial import hacks as H

    repo = make_repo(tmp_path_factory.mktemp("hacked-batch"), SETTINGS)
    shas = [H.commit_hack(repo, H.REWRITES_RECORDING), H.commit_hack(repo, H.RELAYS_STDIN),
            candidate(repo, "honest", [("kernels/k31/moe/situ.py", "def moe_situ(",
                                        "# a comment\ndef moe_situ(")])]
    cuda = torch.cuda.is_available()
    cfg = load(repo / "kern.yaml").resolve(cuda)
    drawn = draws.for_machine(cfg.machine, cfg.test)
    recording = MainRecording(drawn, repo / "runs")
    try:
        reports = [run_test(accuracy_request(cfg, repo, sha, "main", repo / "runs", cuda, hidden=drawn),
                            recording=recording).report for sha in shas]
    finally:
        recording.close(cfg.test.timeout_s)
    return reports


def test_hacks_in_a_batch_are_caught_and_the_next_member_is_judged_on_main_unchanged(hacked_batch):
    rewrites, relays, honest = hacked_batch
    # case 13: the replay is refused main's recording (nothing written: it stands for the rest)
    assert rewrites["evidence"]["outcome_b"] == "tampered", reasons(rewrites)
    assert "kernel code may not read main's recording" in rewrites["b_log_tail"]
    assert "-tampered-" not in rewrites["a_dir"]
    # case 14: the batch's draw, relayed off stdin, is caught as alone
    assert relays["evidence"]["outcome_b"] == "tampered", reasons(relays)
    assert "fd 0 (stdin) is no longer the pipe the gates opened" in relays["b_log_tail"]
    assert honest["verdict"] == "PASS bit-identical", reasons(honest)
    assert honest["a_cached"] and len({r["a_dir"] for r in hacked_batch}) == 1
    assert tensors_left(hacked_batch) == []
