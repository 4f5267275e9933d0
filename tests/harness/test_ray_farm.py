"""farm.kind ray (harness/ray_farm.py): the pure parts, the refusals at start, the bundles a
candidate travels in. The cluster itself is exercised by test_ray_loop.py (slow)."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from harness import ledger as L
from harness.farm import FarmError, Slot
from harness.gitcmd import GitError, git
from harness.orchestrator import rerun_wanted
from harness.settings import Farm
from harness.ray_farm import (_unbundle, check_reachable, local_resources, make_bundle, node_slot,
                              parse_address, task_options)
from tests.gates.candidates import candidate, make_repo


def test_farm_address_forms():
    assert parse_address("") is None  # start a local Ray instance
    assert parse_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert parse_address("ray://head.example:10001") == ("head.example", 10001)
    for bad in ("head", "head:", ":6379", "head:port", "ray://head:70000"):
        with pytest.raises(FarmError, match="farm.address: expected host:port or ray://host:port"):
            parse_address(bad)


def test_an_unreachable_cluster_is_refused_at_start_naming_farm_address():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(FarmError) as e:
        check_reachable(f"127.0.0.1:{port}", timeout_s=2)
    text = str(e.value)
    assert text.startswith(f"farm.address '127.0.0.1:{port}': no Ray cluster answers at 127.0.0.1:{port}")
    assert f"ray start --head --port {port}" in text and 'farm.address to ""' in text
    check_reachable("")  # local: nothing to reach


def test_kern_loop_with_an_unreachable_cluster_stops_before_recording_anything(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    repo = make_repo(tmp_path, {"farm.kind": "ray", "farm.address": f"127.0.0.1:{port}"})
    from tests.gates.candidates import ROOT

    p = subprocess.run([sys.executable, "-m", "harness.cli", "--repo", str(repo), "loop", "--tick",
                        "--no-live"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
    assert p.returncode == 2, p.stderr
    assert f"kern loop: farm.address '127.0.0.1:{port}': no Ray cluster answers" in p.stderr
    assert L.Ledger(L.default_path(repo)).attempts() == []


def test_without_ray_installed_farm_kind_ray_says_how_to_install_it(monkeypatch):
    from harness import ray_farm

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(FarmError, match=r"pip install 'kern-loop\[farm\]' \(or set farm.kind to local\)"):
        ray_farm.RayFarm(".", Farm(kind="ray", address=""), False, [Slot("h", "cpu0")])


def test_what_a_task_asks_of_ray_and_what_a_local_instance_offers():
    assert task_options(False, 2) == {"num_cpus": 1, "num_gpus": 0, "max_retries": 0}  # CPU: no GPU
    assert task_options(True, 2)["num_gpus"] == 2
    cpu = [Slot("h", "cpu0"), Slot("h", "cpu1")]
    assert local_resources(cpu, False) == {"num_cpus": 2, "num_gpus": 0}  # two worker processes
    gpu = [Slot("h", "gpu0-1", ("0", "1")), Slot("h", "gpu2-3", ("2", "3"))]
    assert local_resources(gpu, True) == {"num_cpus": 2, "num_gpus": 4}


def test_the_slot_a_task_ran_on():
    assert node_slot("n1", [2, 3], "2,3", 99) == Slot("n1", "gpu2-3", ("2", "3"))
    assert node_slot("n1", [], None, 4242) == Slot("n1", "cpu-pid4242")


def test_a_node_lost_attempt_is_judged_once_more_and_its_rerun_never_again():
    lost = L.Attempt(5, state=L.CRASHED, reason="node lost: WorkerCrashedError", commit_sha="c" * 40)
    assert rerun_wanted(lost)
    assert not rerun_wanted(L.Attempt(6, state=L.CRASHED, reason="node lost: x", commit_sha="c" * 40,
                                      rerun_of=5))
    assert not rerun_wanted(L.Attempt(7, state=L.CRASHED, reason="kern test: the candidate's side "
                                      "ended with crash", commit_sha="c" * 40))  # the candidate's fault


def test_the_candidate_travels_as_a_bundle_of_base_to_candidate(tmp_path):
    """The node rebuilds base and candidate from two bundles: the base's history (sent once
    per base) and base..candidate, which holds only the candidate's commits."""
    repo = make_repo(tmp_path)
    base = git(repo, "rev-parse", "main").strip()
    rev = candidate(repo, "cand", [("kernels/k31/moe/situ.py", "def moe_situ(", "# x\ndef moe_situ(")])
    delta = make_bundle(repo, rev, base)
    assert make_bundle(repo, base, base) is None  # no commit: nothing travels
    node = tmp_path / "node" / "repo"
    node.mkdir(parents=True)
    git(node, "init", "-q")
    with pytest.raises(GitError):  # the delta alone lacks the base
        _unbundle(node, delta, "candidate")
    _unbundle(node, make_bundle(repo, base, None), "base")
    _unbundle(node, delta, "candidate")
    assert git(node, "rev-parse", f"{rev}^{{commit}}").strip() == rev
    assert git(node, "rev-list", "--count", f"{base}..{rev}").strip() == "1"
    assert not git(repo, "for-each-ref", "refs/kern-farm").strip()  # no ref left behind


def test_the_default_path_never_imports_ray():
    """farm.kind local (the default) loads no Ray: the loop, kern try and the gates run on
    an install without the farm extra."""
    from tests.gates.candidates import ROOT

    code = ("import sys, harness.cli, harness.orchestrator, harness.pipeline, harness.cli.loop, "
            "gates.accuracy, gates.scorer; print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
