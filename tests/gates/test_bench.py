"""``kern bench REV --vs BASE`` on two revisions of a temporary repository (CPU interpreter:
mechanics only). A revision with added work is slower; an identical one is within noise."""
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


def _bench(repo, rev, alternate=None):
    s = load(repo / "kern.yaml")
    return run_bench(BenchRequest(repo, rev, "main", s.data, s.profile(torch.cuda.is_available()),
                                  repo / "runs", torch.cuda.is_available(), alternate=alternate),
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
