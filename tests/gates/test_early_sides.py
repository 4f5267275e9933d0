"""A judgment's tap sides started early and held (gates/accuracy.py ``EarlySides``, the hold point
of gates/side/driver.py; the rule: gates/rules/overlap.py), on the CPU with the small config:
held, a side has imported no tree's module and made no CUDA context; let go, the gate's verdict
is the one it gives with sides started in its own time; not needed, they end with their folders
and leave no process."""
from __future__ import annotations

import time

import pytest
import torch

from gates.accuracy import prepare_early, run_test
from gates.launch import compiled
from gates.rules import hidden as draws, overlap
from harness.pipeline import accuracy_request
from harness.settings import load
from tests.gates.candidates import ONE_ROW_TAP, candidate, process_gone, make_repo, reasons, tensors_left

pytestmark = pytest.mark.slow

EDIT = ("kernels/k31/moe/situ.py", "def moe_situ(", "# a comment that changes no instruction\ndef moe_situ(")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    repo = make_repo(tmp_path_factory.mktemp("early"), ONE_ROW_TAP)
    cand = candidate(repo, "s1", [EDIT])
    cuda = torch.cuda.is_available()
    cfg = load(repo / "kern.yaml").resolve(cuda)
    req = accuracy_request(cfg, repo, cand, "main", repo / "runs", cuda)
    # main's compiled cache, as the judgment before this one made it
    compiled.prepare(repo, "main", repo / "runs", cfg.target, cfg.machine, cuda, 300, req.placement)
    return cfg, repo, cand, cuda


def _request(setup):
    cfg, repo, cand, cuda = setup
    return accuracy_request(cfg, repo, cand, "main", repo / "runs", cuda,
                            hidden=draws.for_machine(cfg.machine, cfg.test))


def _held(early, timeout_s: float = 240.0) -> dict:
    """Each side's report at its hold point, once every one is there."""
    holds = early._holds
    deadline = time.monotonic() + timeout_s
    while any(h.held_at is None for h in holds.values()):
        assert time.monotonic() < deadline, "a side did not reach its hold point"
        time.sleep(0.2)
    return {k: h.report for k, h in holds.items()}


class _NoStoreWork:
    """A slot's model store (``gates.launch.store.ModelStores``'s calls) that fails the test on
    any use: planned, opened, released or ended."""

    def __getattr__(self, name):
        raise AssertionError(f"the model store was used ({name}) by a gate that adopted early sides")


def test_held_sides_touch_no_tree_and_no_cuda_and_the_verdict_stands(setup):
    req = _request(setup)
    early = prepare_early(req, live=False, batch=False, sides=(overlap.A, overlap.B))
    assert early is not None and early.sides == (overlap.A, overlap.B)
    reports = _held(early)
    time.sleep(1.0)  # held: nothing more happens while the other judgment's scorer runs
    for side, r in reports.items():
        # the gates' own side code (Triton's among it) imported before the hold, where the
        # environment says which Triton runs (the CPU's interpreter, or a GPU the gates see)
        assert r == {"kernels": False, "cuda": False, "triton": True}, (side, r)
    assert early.keeper.recorded == 0 and not (early.b_dir / "result.json").exists()
    # the slot's model store held by the loop: a gate that adopts early sides neither starts,
    # leases nor verifies it (gates/rules/overlap.py tap_lease); each side builds its own model
    report = run_test(req, early=early, stores=_NoStoreWork()).report
    assert report["verdict"] == "PASS bit-identical", reasons(report)
    assert report["store"]["plan"] == "none" and "before any lease" in report["store"]["why"]
    assert report["store"]["attached"] == []
    assert report["early"]["sides"] == [overlap.A, overlap.B]
    assert set(report["early"]["held"]) == {"A early", "B early"}
    early_spans = {(s["part"], s["phase"]) for s in report["beside"] if s["part"].endswith("early")}
    assert early_spans == {("A early", "start"), ("B early", "start")}
    t = report["timeline"]
    # each started before the gate, held, and went on in it; main's side recorded after its go
    assert t["a_early"] < t["a_held"] < t["a_go"] <= t["a_recorded"], t
    assert t["b_early"] < t["b_held"] < t["b_go"] <= t["b_released"], t
    assert report["b_dir"] == str(early.b_dir)
    assert tensors_left([report]) == []
    pids = [p for h in early._holds.values() for p in h.pids]
    assert pids and all(process_gone(p) for p in pids)


def test_sides_not_needed_end_with_their_folders(setup):
    req = _request(setup)
    early = prepare_early(req, live=False, batch=False, sides=(overlap.A, overlap.B))
    _held(early)
    pids = [p for h in early._holds.values() for p in h.pids]
    assert len(pids) == 2 and not any(process_gone(p) for p in pids)
    early.close()
    assert all(process_gone(p) for p in pids)
    assert not early.a_dir.exists() and not early.b_dir.exists()


def test_no_early_sides_before_mains_compiled_cache_is_made(tmp_path):
    repo = make_repo(tmp_path, ONE_ROW_TAP)
    cand = candidate(repo, "s1", [EDIT])
    cuda = torch.cuda.is_available()
    cfg = load(repo / "kern.yaml").resolve(cuda)
    req = accuracy_request(cfg, repo, cand, "main", repo / "runs", cuda,
                           hidden=draws.for_machine(cfg.machine, cfg.test))
    assert prepare_early(req, live=False, batch=False, sides=(overlap.A, overlap.B)) is None
    assert not (repo / "runs" / "tap").exists() or not any((repo / "runs" / "tap").iterdir())
