"""The scorer's model store: its lifecycle decided (gates/rules/store.py, pure), its requests
(gates/protocol.py), its weights' digest and each lease's model (gates/side/store.py, in this
process on the small model), and its process on the CPU: started, leased, reused, replaced,
ended, and never left behind when its holder is interrupted or killed (gates/launch/store.py).
The CPU has no CUDA IPC, so there the scorer's sides build their own models and never lease;
the process's lifecycle is exercised here directly. The IPC path: the GPU test at the end."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch
from hypothesis import given, strategies as st

from gates import protocol
from gates.launch.store import ModelStore, ModelStores, store_digest
from gates.requests import Placement
from gates.rules import confinement as C
from gates.rules import store as R
from gates.rules.shm import reported
from gates.scorer import processes
from tests.gates.candidates import GPU_SMALL, ROOT, make_repo

KEY = R.StoreKey("d" * 16, "small", "tp2", 0, 4, "bf16", None, "auto")
SPEC = {"model": "small", "layout": "tp2", "seed": 0, "weight_sets": 4, "context": 96, "steps": 4,
        "rows": [2, 4]}

keys = st.builds(R.StoreKey, st.sampled_from(["d" * 16, "e" * 16]), st.sampled_from(["small", "full"]),
                 st.just("tp2"), st.integers(0, 1), st.just(4), st.sampled_from(["bf16", "f32"]),
                 st.sampled_from([None, "0", "1"]), st.sampled_from(["auto", "off"]))
needs = st.builds(R.Need, keys, st.booleans(), st.integers(1, 2), st.booleans())
helds = st.none() | st.builds(R.Held, keys, st.booleans(), st.booleans(), st.just(False))


# ------------------------------------------------------------------ the lifecycle, pure
@given(helds, needs)
def test_a_store_is_reused_only_alive_intact_and_for_the_same_key(held, need):
    plan = R.decide(held, need)
    shareable = need.cuda and need.world == 1 and need.same_model
    assert (plan.action != R.NONE) == shareable
    if not shareable:
        return
    if held is None:
        assert plan.action == R.START
    elif held.alive and held.intact and held.key == need.key:
        assert plan.action == R.REUSE
    else:
        assert plan.action == R.REPLACE
        assert plan.reason  # says which: ended, changed weights, or the fields that differ


@given(needs)
def test_a_store_is_shared_exactly_where_the_scorer_shares_its_model(need):
    """decide and the scorer's processes() agree on when one store serves the sides."""
    shared, _ = processes(need.cuda, need.same_model, need.world, None, 2)
    assert (R.decide(None, need).action != R.NONE) == shared


def test_a_lease_while_one_is_open_is_refused():
    with pytest.raises(R.StoreRefused, match="one scorer run at a time"):
        R.decide(R.Held(KEY, True, True, True), R.Need(KEY, True, 1, True))


def test_the_key_is_the_weights_and_the_slot_not_the_trees_or_folders_of_a_run(tmp_path):
    """A store outlives judgments: runs on other trees (a later candidate, a later main whose
    model code is unchanged) and other run folders lease the same store; a merge that changes
    the weights' code (STORE_FILES) changes the key, and the store held is replaced."""
    from gates.scorer import store_key

    repo = make_repo(tmp_path)
    spec = {**SPEC, "state_dtype": "bf16"}
    cand = repo.parent / "cand"
    import shutil

    shutil.copytree(repo / "kernels", cand / "kernels")
    experts = cand / "kernels/k31/moe/experts.py"
    experts.write_text(experts.read_text() + "\n# a candidate's kernel\n")
    first = store_key({"A": repo, "B": repo}, spec, Placement())
    assert store_key({"A": cand, "B": repo}, spec, Placement()) == first  # main moved on, same model code
    held = R.Held(first, True, True, False)
    assert R.decide(held, R.Need(store_key({"A": repo, "B": cand}, spec, Placement()), True, 1, True)).action == R.REUSE
    (cand / "kernels/k31/weights.py").write_text((cand / "kernels/k31/weights.py").read_text() + "\n# merged\n")
    merged = R.decide(held, R.Need(store_key({"A": cand, "B": cand}, spec, Placement()), True, 1, True))
    assert merged.action == R.REPLACE and "digest differ" in merged.reason
    assert set(f.name for f in fields(R.StoreKey)) == {"digest", "model", "layout", "seed", "weight_sets",
                                                       "state_dtype", "gpus", "sandbox"}


def test_a_changed_key_names_the_fields_that_differ():
    plan = R.decide(R.Held(KEY, True, True, False),
                    R.Need(replace(KEY, seed=1, gpus="1"), True, 1, True))
    assert plan.action == R.REPLACE and "seed, gpus differ" in plan.reason


def test_weights_changed_under_a_lease_fail_the_candidate_and_retire_the_store():
    kept = R.released(True, ("A", "B"))
    assert kept.keep and kept.failed_check is None
    written = R.released(False, ("A", "B"))
    assert not written.keep and written.failed_check["check"] == R.WEIGHTS_CHECK
    assert "candidate's side" in written.failed_check["why"]
    alone = R.released(False, ("A",))  # no candidate attached: the store goes, nobody is named
    assert not alone.keep and alone.failed_check is None
    unknown = R.released(None, ("A", "B"))
    assert not unknown.keep and unknown.failed_check is None
    held = R.released(True, ("A", "B"), freed=False)  # CUDA IPC kept the lease's state
    assert not held.keep and held.failed_check is None and "still held" in held.reason


@given(st.sampled_from([True, False, None]), st.booleans(), st.booleans(),
       st.sampled_from([("A",), ("A", "B"), ("B",)]))
def test_a_store_whose_dev_shm_was_not_swept_clean_is_not_kept_and_blames_nobody(intact, freed, clean, sides):
    """Entries its group's /dev/shm kept after the sweep (or no word from the store on what it
    maps) retire the store: a side's file would reach the next lease. It is no check of the
    candidate's (nothing of the gates reads that folder); weights written still are."""
    rel = R.released(intact, sides, freed, clean)
    assert rel.keep == (intact is True and freed and clean)
    assert rel.failed_check == R.released(intact, sides, freed).failed_check
    if intact is True and freed and not clean:
        assert "/dev/shm could not be swept" in rel.reason


def test_code_the_store_key_does_not_cover_is_named():
    assert R.uncovered(list(R.STORE_FILES)) == []
    assert R.uncovered(["k31/model.py", "k31/moe/experts.py", "k31/collectives.py"]) == \
        ["k31/collectives.py", "k31/moe/experts.py"]


def test_the_store_digest_covers_the_code_it_runs_and_nothing_else(tmp_path):
    repo = make_repo(tmp_path)
    d0 = store_digest(repo)
    experts = repo / "kernels/k31/moe/experts.py"
    experts.write_text(experts.read_text() + "\n# a candidate's kernel\n")
    assert store_digest(repo) == d0
    plat = repo / "kernels/k31/platform.py"
    plat.write_text(plat.read_text() + "\n# imported by the store\n")
    assert store_digest(repo) != d0


def test_weights_written_under_a_lease_abandon_the_candidate_as_a_scorer_check():
    """The release's failed check lands among the candidate's side's, and the merge rule then
    abandons it by that check, whatever its times say."""
    from gates.results import AccuracyResult, BenchResult
    from gates.rules import decision as D
    from gates.scorer import analyse
    from harness.settings import load

    buckets, weights = [4, 16], [1, 2]
    cfg = load(ROOT / "kern.yaml").resolve(True).bench
    blocks = {k: [{b: [10.0 * b * f] * 3 for b in buckets}] * 2 for k, f in (("A", 1.0), ("B", 0.5))}
    samples = {k: {b: [x for v in blocks[k] for x in v[b]] for b in buckets} for k in blocks}
    checks = {k: [{"bucket": b} for b in buckets] for k in blocks}
    written = R.released(False, ("A", "B")).failed_check
    result = {"verify": {k: {b: {"equal": True} for b in buckets} for k in blocks},
              "store": {"plan": "reuse", "weights_check": written}}
    analysis = analyse(samples, blocks, checks, result, cfg, buckets, weights)
    assert analysis["sides"]["B"]["failed_checks"] == [written]
    assert analysis["sides"]["A"]["failed_checks"] == []
    bench = BenchResult.of({"outcome": "ok", "buckets": buckets, "processes": {"A": 1, "B": 1},
                            "analysis": analysis})
    assert bench.ab.classification == "faster" and not D.needs_reverify(bench, 99.0)
    test = AccuracyResult.of({"verdict": "PASS bit-identical", "reasons": [], "exit_code": 0,
                              "evidence": {"outcome_a": "ok", "outcome_b": "ok"}})
    d = D.decide(True, test, bench)
    assert (d.state, d.reason) == ("abandoned", "scorer check")
    assert [c["check"] for c in d.checks] == [R.WEIGHTS_CHECK]


# ------------------------------------------------------------------ its requests
@given(st.integers(1, 2**20), st.lists(st.integers(1, 512), min_size=1, max_size=6), st.integers(1, 4096),
       st.booleans())
def test_a_lease_line_reads_back_as_the_same_lease(context, rows, steps, state):
    lease = protocol.StoreLease(context, rows, steps, state)
    assert protocol.store_request(lease.line()) == lease


def test_the_store_reads_release_quit_and_refuses_anything_else():
    assert protocol.store_request(protocol.StoreRelease().line()) == protocol.StoreRelease()
    assert protocol.store_request(protocol.StoreHandles().line()) == protocol.StoreHandles()
    assert protocol.store_request(protocol.StoreHandles(True).line()) == protocol.StoreHandles(True)
    assert protocol.store_request(protocol.STORE_QUIT + "\n") is None
    assert protocol.store_request(json.dumps(protocol.Quit().to_dict())) is None
    for bad in ('{"lease": {"context": 0, "rows": [2], "steps": 1}}', '{"lease": {"rows": [2]}}',
                '{"lease": {"context": 8, "rows": [], "steps": 1}}', '{"release": 1}', '{"handles": 1}',
                '{"lease": {"context": 8, "rows": [2], "steps": 1, "state": true}}', '{"handles": "state"}',
                "nonsense"):
        with pytest.raises(protocol.StoreRequestError, match="a bug of the scorer"):
            protocol.store_request(bad)


# ------------------------------------------------------------------ in this process
@pytest.fixture(scope="module")
def small_store():
    from gates.side.store import Store

    return Store(protocol.parse("store", SPEC), "cpu")


def _hashes(tensors):
    from gates.side.fingerprint import raw_hash

    return [raw_hash(t) for t in tensors]


def test_a_leases_model_is_the_model_a_side_builds(small_store):
    """Weights held plus a state built per lease: bit for bit what gates/side/session.Side
    builds for the same spec, so a side attached to a lease runs the model it would build."""
    from gates.side.session import Side, Spec
    from gates.side.store import weight_tensors

    own = Side(Spec.from_dict(SPEC), "cpu").model
    leased = small_store.lease_model(protocol.StoreLease(SPEC["context"], SPEC["rows"], SPEC["steps"]))
    assert _hashes(weight_tensors(leased.weights)) == _hashes(weight_tensors(own.weights))
    assert _hashes(t for _, t in leased.state.tensors()) == _hashes(t for _, t in own.state.tensors())
    assert leased.state.capacity == own.state.capacity


def test_each_lease_gets_a_fresh_state(small_store, tmp_path):
    out = tmp_path / "store.json"
    lease = protocol.StoreLease(SPEC["context"], SPEC["rows"], SPEC["steps"])
    assert "no lease is open" in small_store.handles(out)["error"]
    assert small_store.lease(lease, out)["weights_intact"]
    assert small_store.handles(out) == {"ready": None, "sha256": None}  # the CPU: no IPC
    first = small_store.model.state
    want = _hashes(t for _, t in first.tensors())
    for _, t in first.tensors():  # what a lease's sides leave in its state
        t.view(torch.uint8).view(-1)[:16] ^= 0x5A
    assert small_store.lease(lease, out).get("error")  # the open lease first
    released = small_store.release(out)
    assert released["weights_intact"] and released["freed"] and released["held_bytes"] == 0
    assert released["caches_restored"] is False  # reported: its caches were left changed
    small_store.lease(lease, out)
    assert small_store.model.state is not first
    assert _hashes(t for _, t in small_store.model.state.tensors()) == want
    assert small_store.release(out)["caches_restored"] is True


def test_a_lease_of_the_weights_alone_builds_no_state_and_hands_only_weights(small_store, tmp_path):
    """The accuracy gate's tap sides lease the weights alone: the store builds no state (each
    side builds its own, privately), hands no model of a lease, and still verifies the weights
    when the lease ends."""
    out = tmp_path / "store.json"
    r = small_store.lease(protocol.StoreLease(SPEC["context"], SPEC["rows"], SPEC["steps"], state=False), out)
    assert r["weights_intact"] and small_store.model is None and small_store.open
    assert "weights alone" in small_store.handles(out)["error"]  # no lease's model to hand
    assert small_store.handles(out, weights=True) == {"ready": None, "sha256": None}  # the CPU: no IPC
    assert small_store.lease(protocol.StoreLease(96, [2], 4), out).get("error")  # one lease at a time
    released = small_store.release(out)
    assert released["weights_intact"] and released["freed"] and released["caches_restored"] is None
    assert not small_store.open


def test_a_release_reports_the_dev_shm_files_the_store_maps_by_name_and_inode(small_store, tmp_path):
    """What the harness's sweep of the group's /dev/shm keeps (torch's CUDA IPC counts, mapped
    by the store; here a file this process maps, the store being in this process)."""
    import mmap
    import tempfile

    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm")
    out = tmp_path / "store.json"
    lease = protocol.StoreLease(SPEC["context"], SPEC["rows"], SPEC["steps"], state=False)
    with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="torch_kern_test_") as f:
        f.write(b"\0" * 4096)
        f.flush()
        pair = (os.path.basename(f.name), os.fstat(f.fileno()).st_ino)
        with mmap.mmap(f.fileno(), 4096):
            small_store.lease(lease, out)
            assert pair in reported(small_store.release(out)["shm"])
        small_store.lease(lease, out)
        shm = reported(small_store.release(out)["shm"])
    assert shm is not None and pair not in shm  # unmapped: the sweep would remove it


def test_a_tap_sides_own_state_on_the_stores_weights_is_the_model_it_builds(small_store):
    """What a tap side attached to the store's weights runs (gates/side/session.py's
    ``model_with``: the weights, its own state from the target seed) is bit for bit the model
    it would build itself, and its state is a new one, not the store's or a lease's."""
    from gates.side.session import Side, Spec, model_with
    from gates.side.store import weight_tensors
    from kernels.k31.workload import Workload

    own = Side(Spec.from_dict(SPEC), "cpu")
    bound = Workload(own.dims.vocab, own.max_rows, SPEC["context"], SPEC["steps"] + 8, SPEC["seed"]).position_bound
    tapped = model_with(small_store.weights, own.shapes, own.max_rows, bound, SPEC["seed"], torch.device("cpu"))
    assert _hashes(weight_tensors(tapped.weights)) == _hashes(weight_tensors(own.model.weights))
    assert _hashes(t for _, t in tapped.state.tensors()) == _hashes(t for _, t in own.model.state.tensors())
    again = model_with(small_store.weights, own.shapes, own.max_rows, bound, SPEC["seed"], torch.device("cpu"))
    assert all(a.data_ptr() != b.data_ptr() for (_, a), (_, b) in zip(tapped.state.tensors(), again.state.tensors()))


def test_one_changed_weight_byte_is_seen_and_no_lease_is_given(small_store, tmp_path):
    from gates.side.store import weight_tensors

    t = next(w for w in weight_tensors(small_store.weights) if w.dtype == torch.uint8)
    assert small_store.digest.intact()
    t.view(-1)[7] ^= 1
    try:
        assert not small_store.digest.intact()
        r = small_store.lease(protocol.StoreLease(96, [2], 4), tmp_path / "store.json")
        assert not r["weights_intact"] and small_store.model is None
    finally:
        t.view(-1)[7] ^= 1
    assert small_store.digest.intact()


def test_a_side_loads_only_the_handles_the_store_wrote(tmp_path):
    """The lease's file lies in the run folder the candidate's side writes too: a side checks
    the bytes against the store's hash (sent over the scorer's pipe) before unpickling them."""
    from gates.side.session import load_shared, save_shared

    path = tmp_path / "store.lease1.ipc"
    sha = save_shared({"weights": [1, 2, 3]}, path)
    assert load_shared(path, sha) == {"weights": [1, 2, 3]}
    path.write_bytes(path.read_bytes().replace(b"weights", b"wEights"))
    with pytest.raises(RuntimeError, match="tamper: the shared model's handles"):
        load_shared(path, sha)


# ------------------------------------------------------------------ its process, on the CPU
def _start(repo: Path, work: Path, key=KEY, place=Placement()):
    return lambda: ModelStore(key, repo, SPEC, work, place, None, 300)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.add(k)
            todo.append(k)
    return out


def _gone(pids, within_s=30.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


# the scorer times one bucket on the CPU here: what these tests show of the store (started,
# leased, reused by a second run, ended) does not depend on how many buckets a run times, and
# the CPU scorer test's two runs cost about a bucket each (kern.yaml's two: 72 s idle, one: 40 s).
# On a GPU the small model too (GPU_SMALL): the full config's step (85.8 GiB) fits no 80 GB card
CPU_ONE_BUCKET = {"profiles.cpu.buckets": [2], "profiles.cpu.weights": [1]}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("store"), {**CPU_ONE_BUCKET, **GPU_SMALL})


@pytest.mark.slow
def test_a_store_process_is_leased_reused_replaced_and_ended(repo, tmp_path):
    need = R.Need(KEY, True, 1, True)  # what a GPU run would ask: the decision, not the IPC
    with ModelStores() as stores:
        assert stores.plan(need).action == R.START
        store = stores.open(stores.plan(need), _start(repo, tmp_path / "w1"))
        assert R.uncovered(store.ready["loaded"]) == [] and store.ready["build_s"] > 0
        pids = {store.proc.proc.pid} | _descendants(store.proc.proc.pid)
        assert store.lease(protocol.StoreLease(96, [2, 4], 4), 120)["weights_intact"]
        assert store.handles(120) == {"ready": None, "sha256": None}  # the CPU: no IPC file
        with pytest.raises(R.StoreRefused):
            stores.plan(need)
        assert stores.released(("A", "B"), 120).keep
        assert stores.plan(need).action == R.REUSE
        assert stores.open(stores.plan(need), _start(repo, tmp_path / "nope")) is store
        assert store.lease(protocol.StoreLease(80, [1, 3, 17], 2), 120)["weights_intact"]
        assert stores.released(("A", "B"), 120).keep and store.leases == 2
        other = replace(KEY, weight_sets=2)
        plan = stores.plan(R.Need(other, True, 1, True))
        assert plan.action == R.REPLACE and "weight_sets" in plan.reason
        again = stores.open(plan, _start(repo, tmp_path / "w2", other))
        assert again is not store and stores.started == 2
        assert _gone(pids), "the replaced store's processes are still running"
        pids = {again.proc.proc.pid} | _descendants(again.proc.proc.pid)
    assert stores.store is None
    assert _gone(pids), "the store's processes outlived ModelStores.close"


@pytest.mark.slow
def test_a_store_ends_with_its_holder_interrupted(repo, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with ModelStores() as stores:
            store = stores.open(R.Plan(R.START, ""), _start(repo, tmp_path / "w"))
            pids = {store.proc.proc.pid} | _descendants(store.proc.proc.pid)
            raise KeyboardInterrupt
    assert _gone(pids)


# a side that joined the store's group (a candidate's): files for the next judgment's sides
SHM_PLANT = r"""
import os
store = [p for p in os.listdir("/proc") if p.isdigit() and
         b"gates.side.driver\0store" in open("/proc/%s/cmdline" % p, "rb").read()]
assert store, "the store process is not in the group's PID namespace"
open("/dev/shm/planted", "w").write("for the next judgment")
open("/dev/shm/torch_%s_x" % store[0], "w").write("named like the store's")
os.makedirs("/dev/shm/dir/sub")
"""


@pytest.mark.slow
def test_a_stores_group_dev_shm_is_swept_after_each_lease(repo, tmp_path):
    """A store process in its own sandbox group (the CPU: it maps none of /dev/shm, and says
    so having read its maps inside the sandbox); a side that joined it plants a file, a file
    named like the store's and a folder in the group's /dev/shm. The release sweeps them (said
    in the store's log and its record), the store is kept, and the next lease finds nothing."""
    from gates.launch import sandbox
    from gates.launch.process import side_env
    from gates.rules.shm import ShmSweep

    if sandbox.facts().namespaces:
        pytest.skip(f"needs the namespace sandbox (a group's /dev/shm of its own): {sandbox.facts().namespaces}")
    work = tmp_path / "runs" / "store" / "s1"
    box = sandbox.side_group("store", repo, work / "store.json", peers=False)
    lease = protocol.StoreLease(SPEC["context"], SPEC["rows"], SPEC["steps"], state=False)
    with ModelStores() as stores:
        store = stores.open(R.Plan(R.START, ""), lambda: ModelStore(KEY, repo, SPEC, work, Placement(), box, 300))
        assert store.lease(lease, 120)["weights_intact"]
        cmd = [sys.executable, "-c", SHM_PLANT, "gates.side.driver", "tap", "--tree", str(repo), "--out",
               str(tmp_path / "runs" / "tap" / "t1" / "tap.json")]
        r = subprocess.run(sandbox.wrap(cmd, Placement(), box), capture_output=True, text=True, timeout=120,
                           cwd=ROOT, env=side_env(Placement()))
        assert r.returncode == 0, r.stderr
        planted = sorted(os.listdir(box.shm))
        assert len(planted) == 3 and "planted" in planted and any(n.startswith("torch_") for n in planted)
        assert stores.released(("A", "B"), 120).keep
        assert reported(stores.last_release["shm"]) == frozenset()  # read inside its sandbox: it maps none of it
        assert stores.last_sweep == ShmSweep(tuple(planted)) and os.listdir(box.shm) == []
        assert "swept 3 entries of the group's /dev/shm" in store.log_path.read_text()
        assert stores.plan(R.Need(KEY, True, 1, True)).action == R.REUSE
        assert store.lease(lease, 120)["weights_intact"]
        assert stores.released(("A",), 120).keep and stores.last_sweep == ShmSweep(())
        shm = box.shm
    assert not os.path.exists(shm)  # gone with the store's group


HOLDER = """
import json, os, sys, time
from pathlib import Path
from gates.launch.store import ModelStore, ModelStores
from gates.requests import Placement
from gates.rules import confinement as C
from gates.rules import store as R
from tests.gates.test_store import KEY, SPEC
stores = ModelStores()
s = stores.open(R.Plan(R.START, ""), lambda: ModelStore(KEY, Path(sys.argv[1]), SPEC, Path(sys.argv[2]),
                                                       Placement(), None, 300))
print(json.dumps({"ready": True}), flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_store_dies_with_a_killed_holder(repo, tmp_path):
    """kill -9 of the harness's process (a crash, the OOM killer): its store goes with it, so no
    orphan holds the GPU's memory. Every process of the store is stopped first: one busy
    building or leasing never reads the end of its stdin, only the death signal ends it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(repo), str(tmp_path / "w")],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert json.loads(holder.stdout.readline()) == {"ready": True}
        pids = _descendants(holder.pid)
        assert pids, "the holder started no store"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        assert _gone(pids), f"processes of the store outlived its killed holder: {sorted(pids)}"
    finally:
        if holder.poll() is None:
            holder.kill()
        for pid in pids if "pids" in locals() else ():
            if _alive(pid):  # what the test found left: never left running
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_scorer_run_and_its_re_measurement_lease_one_store_on_the_cpu(repo, monkeypatch):
    """The scorer's own store path on the CPU: the decision told the sides share (the CPU has
    no CUDA IPC, so each side still builds its own model and the lease hands no file), two
    runs on one ModelStores as gates/judging.py makes them: one store, started for the first
    run in a run folder of its own, reused by the second (its sides in a run folder of their
    own, joining the store's sandbox in their own roots) with a state of its own, its weights
    verified unchanged after each, ended with its holder."""
    import gates.scorer as S
    from harness.pipeline import bench_request
    from harness.settings import load

    monkeypatch.setattr(S, "processes", lambda cuda, same, world, forced, sides:
                        (same and world == 1, bool(forced) and sides > 1))
    monkeypatch.setattr(S, "Need", lambda key, cuda, world, same: R.Need(key, True, world, same))
    cfg = load(repo / "kern.yaml").resolve(False)
    req = bench_request(cfg, repo, "main", "main", repo / "runs", False, rounds=1, replays=2)
    events = []
    with ModelStores() as stores:
        first = S.run_bench(req, progress=events.append, stores=stores).report
        second = S.run_bench(replace(req, alternate=True), progress=events.append, stores=stores).report
        assert stores.started == 1 and stores.store.leases == 2
        store_dir = stores.store.work
        pids = {stores.store.proc.proc.pid} | _descendants(stores.store.proc.proc.pid)
    assert _gone(pids)
    assert first["outcome"] == second["outcome"] == "ok"
    assert (first["store"]["plan"], second["store"]["plan"]) == ("start", "reuse")
    assert first["store"]["kept"] and second["store"]["kept"]
    assert first["store"]["weights_check"] is None and second["store"]["weights_check"] is None
    from gates.launch.sandbox import facts

    if not facts().namespaces:  # the group's /dev/shm swept after each run: honest sides leave nothing
        assert first["store"]["shm_swept"] == second["store"]["shm_swept"] == \
            {"removed": 0, "names": [], "left": [], "mapped_known": True}
    assert second["work_dir"] != first["work_dir"]  # each run its own folder; the store its own
    assert (Path(second["work_dir"]) / "sideA.log").exists()
    assert [p.name for p in (repo / "runs" / "store").iterdir()] == [store_dir.name]
    assert not any(C.inside(str(store_dir), w) for w in (first["work_dir"], second["work_dir"]))
    assert [str(e) for e in events if type(e).__name__ == "StoreReady"][1].startswith("store: weights reused")
    assert not second["analysis"]["sides"]["B"]["failed_checks"]


# ------------------------------------------------------------------ the IPC path, on a GPU
@pytest.mark.gpu
@pytest.mark.slow
def test_a_judgments_scorer_runs_lease_one_store_over_cuda_ipc(repo):
    """Two scorer runs on one ModelStores (a judgment's scorer and its re-measurement): one
    store process, the second run reusing its weights with a state of its own; both runs'
    weights verified unchanged, and the store ended with its holder."""
    from gates.scorer import run_bench
    from harness.pipeline import bench_request
    from harness.settings import load

    cfg = load(repo / "kern.yaml").resolve(True)
    req = bench_request(cfg, repo, "main", "main", repo / "runs", True, rounds=1, replays=2)
    with ModelStores() as stores:
        first = run_bench(req, progress=lambda e: None, stores=stores).report
        second = run_bench(replace(req, alternate=True), progress=lambda e: None, stores=stores).report
        assert stores.started == 1 and stores.store is not None and stores.store.leases == 2
        pids = {stores.store.proc.proc.pid} | _descendants(stores.store.proc.proc.pid)
    assert first["outcome"] == second["outcome"] == "ok"
    assert (first["store"]["plan"], second["store"]["plan"]) == ("start", "reuse")
    assert first["store"]["kept"] and second["store"]["kept"]
    assert second["work_dir"] != first["work_dir"]
    assert not second["analysis"]["sides"]["B"]["failed_checks"]
    assert _gone(pids)


def test_kern_loop_and_kern_try_hold_one_store_per_slot_across_judgments_and_end_them(monkeypatch):
    """harness/pipeline.py: inside ``holding_stores`` every judgment on a slot gets that slot's
    ModelStores (one per slot, the same across judgments); the block's end (or an error, or
    Ctrl-C) ends every store; outside it each judgment keeps its own (None)."""
    from types import SimpleNamespace

    from harness.pipeline import Context, holding_stores

    closed = []
    monkeypatch.setattr(ModelStores, "close", lambda self: closed.append(self))
    ctx = Context(None, None, None, False, None)
    a, b = SimpleNamespace(name="gpu0"), SimpleNamespace(name="gpu1")
    assert ctx.stores_for(a) is None
    with pytest.raises(KeyboardInterrupt):
        with holding_stores(ctx):
            first = ctx.stores_for(a)
            assert isinstance(first, ModelStores) and ctx.stores_for(a) is first
            other = ctx.stores_for(b)
            assert other is not first
            raise KeyboardInterrupt
    assert closed == [first, other] and ctx.stores is None and ctx.stores_for(a) is None


@pytest.mark.gpu
@pytest.mark.slow
def test_a_judgments_tap_sides_and_scorer_lease_one_store_over_cuda_ipc(repo, tmp_path):
    """On a GPU the accuracy gate's tap sides lease the slot's store (the weights alone, each
    side a state of its own: their phases say "attach", not "build"), the scorer then reuses
    the same store, and its weights are verified unchanged; a candidate whose STORE_FILES
    differ builds its own model (only main's side attached)."""
    from gates.accuracy import run_test
    from gates.scorer import run_bench
    from harness.pipeline import accuracy_request, bench_request
    from harness.settings import load
    from tests.gates.candidates import candidate

    cfg = load(repo / "kern.yaml").resolve(True)
    with ModelStores() as stores:
        test = run_test(accuracy_request(cfg, repo, "main", "main", repo / "runs", True), stores=stores).report
        assert test["verdict"].startswith("PASS"), test["reasons"]
        assert test["store"]["plan"] == "start" and test["store"]["attached"] == ["A", "B"]
        assert test["store"]["kept"], test["store"]
        # the candidate's side attaches while main's records: that span is "beside", not on the path
        phases = {(p["part"], p["phase"]) for p in test["phases"] + test["beside"]}
        assert ("A record", "attach") in phases and ("B replay", "attach") in phases
        assert ("A record", "build") not in phases and ("B replay", "build") not in phases
        # each side says what it held on the card at most, below what the card has
        mem = test["device_memory"]
        assert set(mem) == {"A record", "B replay"} and all(
            0 < m["peak_allocated_gib"] <= m["peak_reserved_gib"] < m["device_total_gib"] for m in mem.values()), mem
        bench = run_bench(bench_request(cfg, repo, "main", "main", repo / "runs", True, rounds=1, replays=2),
                          stores=stores).report
        assert bench["store"]["plan"] == "reuse" and stores.started == 1
        assert set(bench["verify_s"]) == {"A", "B"} and min(bench["verify_s"].values()) > 0
        sha = candidate(repo, "weights-comment", [("kernels/k31/weights.py", '"""', '"""# a comment\n', )])
        other = run_test(accuracy_request(cfg, repo, sha, "main", repo / "runs", True), stores=stores).report
        assert other["store"]["attached"] == ["A"], other["store"]  # its tree builds its own
        pids = {stores.store.proc.proc.pid} | _descendants(stores.store.proc.proc.pid)
    assert _gone(pids)
