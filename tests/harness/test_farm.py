"""Judging slots (harness/farm.py): which slots kern.yaml's farm keys give on a machine, how
many judgments run at once, the per-slot locks, and what a slot's gate processes see."""
from __future__ import annotations

import threading
import time

import pytest

from gates import protocol
from gates.launch import process as launch
from gates.launch.turn import scorer_turn
from gates.requests import Placement
from gates.summary import GateSummary
from harness import farm
from harness.farm import FarmError, Pool, Slot, resolve_slots
from harness.orchestrator import profile_path
from harness.pipeline import Judgment, Outcome, with_slot
from harness.settings import validate
from tests.gates.candidates import ROOT


def _slots(spec, cuda=True, visible=("0", "1", "2", "3"), w=1):
    return resolve_slots(spec, cuda=cuda, visible=list(visible), gpus_per_slot=w, host="h")


def test_auto_is_one_slot_per_gpu_or_groups_of_w_gpus_of_this_host():
    assert _slots("auto") == [Slot("h", f"gpu{i}", (str(i),)) for i in range(4)]
    assert [s.visible for s in _slots("auto", w=2)] == ["0,1", "2,3"]
    # 3 GPUs a slot on 4: one slot, the fourth GPU left out rather than shared
    assert [s.visible for s in _slots("auto", w=3)] == ["0,1,2"]
    # one GPU: one slot, as before slots existed
    assert _slots("auto", visible=("0",)) == [Slot("h", "gpu0", ("0",))]


def test_auto_names_the_gpus_cuda_visible_devices_names():
    """A loop started with CUDA_VISIBLE_DEVICES=4,5 hands out GPUs 4 and 5 (a slot's
    processes get the variable anew, so it must hold the physical ids, not 0 and 1)."""
    vis = farm.visible_gpus({"CUDA_VISIBLE_DEVICES": "4,5"}, 2)
    assert vis == ["4", "5"]
    assert [s.visible for s in _slots("auto", visible=vis)] == ["4", "5"]
    assert farm.visible_gpus({}, 3) == ["0", "1", "2"]


def test_auto_on_a_cpu_machine_is_one_cpu_slot_unless_listed():
    assert _slots("auto", cuda=False, visible=()) == [Slot("h", "cpu0")]
    listed = _slots(["cpu0", "cpu1"], cuda=False, visible=())
    assert [(s.name, s.visible) for s in listed] == [("cpu0", ""), ("cpu1", "")]


def test_an_explicit_list_of_gpu_slots():
    assert [(s.name, s.devices) for s in _slots(["0,1", "3,2"], w=2)] == \
        [("gpu0-1", ("0", "1")), ("gpu3-2", ("3", "2"))]


@pytest.mark.parametrize("spec, cuda, w, words", [
    (["0", "0"], True, 1, "GPU '0' is in slot '0' and in '0'"),
    (["0,1", "1,2"], True, 2, "GPU '1' is in slot '0,1' and in '1,2'"),
    (["7"], True, 1, "GPU '7' of slot '7' is not visible here (visible: 0,1,2,3)"),
    (["0,1"], True, 1, "slot '0,1' has 2 GPU(s), expected farm.gpus = 1"),
    (["cpu0"], True, 1, "'cpu0' is a CPU slot but this machine has CUDA"),
    (["0"], False, 1, "'0' names GPUs but this machine has no CUDA"),
    ([], True, 1, "expected 'auto' or a non-empty list"),
    ("all", True, 1, "expected 'auto' or a non-empty list"),
    (["cpu0", "cpu0"], False, 1, "slot(s) ['cpu0'] listed twice"),
    (["gpu 0"], True, 1, "expected GPU ids"),
    ("auto", True, 5, "auto with farm.gpus = 5 needs 5 visible GPU(s), found 4"),
    ("auto", True, 0, "farm.gpus: expected a number of GPUs per slot >= 1, found 0"),
])
def test_slots_that_do_not_fit_the_machine_are_refused_saying_what_to_edit(spec, cuda, w, words):
    with pytest.raises(FarmError) as e:
        _slots(spec, cuda=cuda, visible=("0", "1", "2", "3") if cuda else (), w=w)
    assert words in str(e.value)


def test_judging_width_is_one_per_slot_and_never_more_than_the_work():
    assert farm.judging_width(5, 2) == 2
    assert farm.judging_width(1, 8) == 1
    assert farm.judging_width(3, 1) == 1  # one GPU: one at a time, as before
    assert farm.judging_width(0, 4) == 1


def test_kern_yaml_farm_keys_are_validated():
    import yaml

    base = yaml.safe_load((ROOT / "kern.yaml").read_text())
    assert validate(base) == []
    assert base["farm"] == {"slots": "auto", "gpus": 1, "kind": "local", "address": "",
                            "isolate": False}
    del base["farm"]
    assert validate(base) == []  # a kern.yaml from before slots: auto, local
    bad = {**base, "farm": {"slots": "every", "gpus": 0, "kind": "slurm"}}
    problems = validate(bad)
    assert "farm.slots: expected 'auto' or a non-empty list of GPU ids (\"0\", \"2,3\", or integers " \
        ">= 0) or CPU slot names (\"cpu0\"), found 'every'" in problems
    assert "farm.gpus: expected an integer >= 1, found 0" in problems
    assert "farm.kind: expected one of local, ray, found 'slurm'" in problems
    assert "farm.isolate: expected true or false, found 'yes'" in validate({**base, "farm": {"isolate": "yes"}})


@pytest.mark.parametrize("isolate", (True, False))
def test_isolated_scorer_rounds_take_turns_and_others_never_wait(tmp_path, isolate):
    """Two judgments reach their scorer at once: with farm.isolate the second enters only after
    the first left (and says it waits); without it both are inside together."""
    inside, most, said = [], [0], []
    both_arrived = threading.Barrier(2)
    lock = threading.Lock()

    def judge(name):
        both_arrived.wait()
        with scorer_turn(tmp_path, isolate, said.append):
            with lock:
                inside.append(name)
                most[0] = max(most[0], len(inside))
            # stay until the other judgment is seen waiting (isolate) or inside too (not):
            # no sleep decides the outcome, however loaded the machine
            end = time.monotonic() + 20
            while time.monotonic() < end and not (said if isolate else most[0] == 2 or len(inside) == 2):
                time.sleep(0.01)
            with lock:
                inside.remove(name)

    threads = [threading.Thread(target=judge, args=(n,)) for n in ("a", "b")]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert most[0] == (1 if isolate else 2)
    assert [str(e) for e in said] == (["farm.isolate: waiting for another judgment's scorer rounds"] if isolate else [])


def test_each_judgment_holds_its_own_slot_and_its_sides_see_only_it(tmp_path):
    """Two judgments at once hold cpu0 and cpu1; a third waits until one is given back; each
    thread's gate processes get its own slot's CUDA_VISIBLE_DEVICES and a quarter of the
    memory (two sides each); outside a slot the caller's environment is left alone."""
    pool = Pool(tmp_path, [Slot("h", "cpu0"), Slot("h", "gpu7", ("7",))], poll_s=0.05)
    assert pool.free() == 2
    seen, caps, release, holding = {}, [], threading.Event(), threading.Barrier(3)

    def judge(i):
        with pool.hold() as slot:
            env = launch.side_env(pool.placement(slot, "auto"))
            seen[i] = (slot.name, env.get("CUDA_VISIBLE_DEVICES"))
            caps.append(env.get(protocol.MEMORY_VARIABLE))
            holding.wait()
            release.wait()

    threads = [threading.Thread(target=judge, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    holding.wait()  # both slots held now
    assert pool.free() == 0
    assert sorted(seen.values()) == [("cpu0", ""), ("gpu7", "7")]
    quarter = launch.memory_limit(False, launch._physical_memory(), judgments=2)
    assert caps == [str(quarter)] * 2
    with pytest.raises(TimeoutError, match="no judging slot of 2 came free"):
        with pool.hold(wait_s=0.2):
            pass
    # another process's lock on the same files (a kern try beside the loop) counts the same
    other = Pool(tmp_path, pool.slots)
    assert other.free() == 0
    release.set()
    for t in threads:
        t.join()
    with pool.hold(wait_s=1) as slot:
        assert slot.name == "cpu0"
    assert launch.memory_limit(False, 8 << 30, judgments=2) == 2 << 30
    assert launch.memory_limit(False, 8 << 30) == 4 << 30
    import os

    assert launch.side_env(Placement()).get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")


def test_a_waiting_judgment_takes_the_first_slot_given_back(tmp_path):
    pool = Pool(tmp_path, [Slot("h", "cpu0")], poll_s=0.02)
    order = []
    with pool.hold():
        def second():
            with pool.hold() as s:
                order.append(("second", s.name, time.monotonic()))

        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.2)
        assert order == []  # still waiting: the one slot is held
        given_back = time.monotonic()
    t.join(5)
    assert order and order[0][1] == "cpu0" and order[0][2] >= given_back


def test_the_ledger_row_names_host_and_slot_only_when_a_gate_process_ran():
    out = Outcome("abandoned", "accuracy", {"gate": GateSummary()})
    ran = with_slot(out, Judgment(None, {}, None, None, host="node-a", slot="gpu1"))
    assert ran.fields == {"gate": GateSummary(), "host": "node-a", "slot": "gpu1"}
    assert with_slot(out, Judgment(None, None, None, None)).fields == {"gate": GateSummary()}  # scope


def test_mains_profile_is_kept_by_commit_and_by_what_decides_its_content(tmp_path):
    spec = {"model": "small", "rows": [2], "replays": 5}
    a = profile_path(tmp_path, "a" * 40, spec, False)
    assert a == profile_path(tmp_path, "a" * 40, dict(spec), False)  # reused by every tick
    assert a.name.startswith("aaaaaaaaaaaa-loop-")
    assert a != profile_path(tmp_path, "b" * 40, spec, False)  # another main
    assert a != profile_path(tmp_path, "a" * 40, {**spec, "rows": [4]}, False)  # kern.yaml changed
    assert a != profile_path(tmp_path, "a" * 40, spec, True)  # another device kind


# --------------------------------------------------------------------------- the orchestrator
def test_two_slots_judge_two_attempts_at_once_and_apply_them_in_number_order(tmp_path, monkeypatch):
    """With farm.slots [cpu0, cpu1] a tick judges two queued attempts at the same time (each
    gate stand-in waits until the other is inside its own), each on its own slot, and records
    them in number order: #1 (faster) merges, #2 (slower, judged against the same base) is
    abandoned; each row names the host and the slot that judged it."""
    import os

    import git

    from harness import ledger as L
    from harness.orchestrator import Orchestrator
    from tests.gates.candidates import candidate, context, make_repo
    from tests.harness.test_faults import COMBINE_EDIT, EDIT, Gates, faster, queued

    repo = make_repo(tmp_path, {"farm.slots": ["cpu0", "cpu1"]})
    one = candidate(repo, "one", [EDIT])
    two = candidate(repo, "two", [COMBINE_EDIT])
    both_inside = threading.Barrier(2, timeout=60)
    gates = Gates(monkeypatch)
    seen = []

    def run_test(req, progress=None):
        seen.append((req.rev, launch.side_env(req.placement).get("CUDA_VISIBLE_DEVICES")))
        both_inside.wait()  # a second judgment only after the first ended would break it
        return gates.__class__.run_test(gates, req, progress)

    def run_bench(req, progress=print, stores=None):
        gates.calls.append(("bench", req.rev, req.base))
        return faster(req.machine, req.scorer, 0.12 if req.rev == one else -0.12)

    monkeypatch.setattr("gates.accuracy.run_test", run_test)
    monkeypatch.setattr("gates.scorer.run_bench", run_bench)
    ctx, settings_ = context(repo)
    base = git.Repo(repo).head.commit.hexsha
    n1, n2 = queued(ctx, one, "one"), queued(ctx, two, "two")
    rep = Orchestrator(ctx).tick(spawn=False)
    assert [c[0] for c in rep.collected] == [n1, n2]
    rows = [(a.number, a.state, a.reason, a.gate) for a in ctx.ledger.attempts()]
    assert sorted(seen) == sorted([(one, ""), (two, "")]), rows  # CPU slots: no GPU visible
    a1, a2 = ctx.ledger.attempt(n1), ctx.ledger.attempt(n2)
    assert (a1.state, a2.state, a2.reason) == (L.MERGED, L.ABANDONED, L.SLOWER)
    assert {a1.slot, a2.slot} == {"cpu0", "cpu1"} and a1.host == a2.host == os.uname().nodename
    assert a2.base_sha == base and ctx.repo.main_sha() == one


H200 = {"index": "0", "uuid": "GPU-4f1c-aa", "name": "NVIDIA H200"}
H100 = {"index": "1", "uuid": "GPU-77d2-bb", "name": "NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize("slots,listed,want", [
    ([Slot("h", "cpu0")], "nvidia-smi not on PATH", "cpu"),
    ([Slot("h", "gpu0", ("0",))], [H200, H100], "NVIDIA H200"),
    ([Slot("h", "gpu0", ("0",)), Slot("h", "gpu1", ("1",))], [H200, H100],
     "NVIDIA H100 80GB HBM3 + NVIDIA H200"),  # a mixed machine: both named, in one order
    ([Slot("h", "gpu0", ("GPU-77d2",))], [H200, H100], "NVIDIA H100 80GB HBM3"),  # a uuid prefix
    ([Slot("h", "gpu0", ("3",))], [H200, H100], "unlisted GPU 3"),
    ([Slot("h", "gpu0", ("0",))], "nvidia-smi exit 9: no driver", "unlisted GPU 0"),
])
def test_slot_models_name_what_judges_on_the_slots(slots, listed, want):
    assert farm.slot_models(slots, listed) == want


def test_a_score_judged_on_another_gpu_model_belongs_to_a_phase_of_its_own(tmp_path, monkeypatch):
    # the device lends an H100 or an H200: one ledger must not draw one main-score line across both
    from harness import ledger as L
    from harness.pipeline import Context, phase_definition
    from harness.settings import load
    from harness.worktrees import Repo
    from tests.gates.candidates import make_repo

    repo = make_repo(tmp_path, tree=False)
    led = L.Ledger(L.default_path(repo))
    monkeypatch.setattr(farm, "slots_for", lambda *a, **k: [Slot("h", "gpu0", ("0",))])
    phases = []
    for card in (H200, {**H100, "index": "0"}, H200):
        monkeypatch.setattr(farm, "gpu_listing", lambda card=card: [card])
        ctx = Context(Repo(repo), load(repo / "kern.yaml").resolve(True), repo / "runs", True, led)
        phases.append(led.phase(phase_definition(ctx)))
    assert phases[0] != phases[1] and phases[2] != phases[1]
    assert [p.definition["device"] for p in led.phases()] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]


def test_gpu_listing_reads_nvidia_smi_and_says_why_not(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "0, GPU-4f1c-aa, NVIDIA H200"\necho "1, GPU-77d2-bb, NVIDIA H100 80GB HBM3"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert farm.gpu_listing() == [H200, H100]
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert farm.gpu_listing() == "NVIDIA-SMI has failed"
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert farm.gpu_listing() == "nvidia-smi not on PATH"
