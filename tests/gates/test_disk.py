"""What a judgment writes, whether the disk has room, a side that ran out of it, and the tap
recordings deleted once no judgment holds them (gates/launch/disk.py); a side's last words as the
gates keep them (gates/results.py) and what the merge rule does with a full disk."""
from __future__ import annotations

import dataclasses
import os

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gates.launch import disk
from gates.results import DISK_FULL, AccuracyResult, BenchResult, LastWords, last_lines
from gates.rules import decision as D
from gates.rules import footprint
from gates.settings import AccuracySettings, MachineProfile
from gates.summary import GateSummary, summarize
from harness.settings import resolve
from tests.gates.candidates import ROOT

DATA = yaml.safe_load((ROOT / "kern.yaml").read_text())
CPU, GPU = resolve(DATA, False), resolve(DATA, True)
MIB = footprint.MIB


def _cpu(**test) -> tuple[AccuracySettings, MachineProfile]:
    """kern.yaml's test section with ``test`` changed, and its cpu profile without its
    measured recording_mb: main's kept calls are then charged the whole snapshot budget."""
    return dataclasses.replace(CPU.test, **test), dataclasses.replace(CPU.machine, recording_mb=None)


@given(budget=st.integers(1, 1 << 16), measured=st.floats(0.5, 1 << 17))
def test_a_measured_recording_is_charged_below_the_budget_never_above(budget, measured):
    s, prof = _cpu(snapshot_budget_mb=budget)
    assert footprint.kept_mb(prof, s) == budget
    assert footprint.kept_mb(dataclasses.replace(prof, recording_mb=measured), s) == min(measured, budget)


# --------------------------------------------------------------------------- the estimate
def test_the_estimate_of_the_small_config_is_its_budget_and_its_logits():
    s, prof = _cpu(snapshot_budget_mb=1)
    jb = footprint.judgment_bytes(prof, s, CPU.bench, copies=False)
    # tap rows [1, 3, 17, 8] and the buckets [2, 4] (no size is left to draw: no hidden
    # extra), one step, layout tp2: rank 0's 512 of the 1024 logits, float32
    assert jb.logits == (1 + 3 + 17 + 8 + 2 + 4) * 1 * 512 * 4
    assert jb.kept == 1 * MIB
    # A records (logits, kept) and repeats twice (noise, band); B replays once
    assert jb.tap == 3 * jb.logits + jb.kept + jb.logits
    assert footprint.judgment_bytes(prof, s, CPU.bench, copies=True).tap == jb.tap + jb.kept + jb.logits
    assert jb.need == jb.peak + footprint.MARGIN_MIN and jb.peak == max(jb.tap, jb.scorer)


def test_the_gpu_profile_counts_the_hidden_sizes_it_may_draw():
    prof = GPU.machine
    jb = footprint.judgment_bytes(prof, GPU.test, GPU.bench, copies=False)
    visible = sum(dict.fromkeys(prof.test_rows + prof.buckets))
    # the two largest sizes 1 .. 256 that are neither a bucket nor a test row: 255 and 254
    assert jb.logits == (visible + 255 + 254) * prof.test_steps * (163840 // 8) * 4
    assert jb.kept == GPU.test.snapshot_budget_mb * MIB
    assert jb.margin == int(jb.peak * footprint.MARGIN_FRACTION)


@given(budget=st.integers(1, 1 << 16), rows=st.lists(st.integers(1, 64), min_size=1, max_size=6),
       steps=st.integers(1, 4), world=st.sampled_from([1, 2, 4]), copies=st.booleans())
def test_the_estimate_grows_with_everything_a_judgment_writes(budget, rows, steps, world, copies):
    s, prof = _cpu(snapshot_budget_mb=budget)
    prof = dataclasses.replace(prof, test_rows=rows, test_steps=steps)
    base = footprint.judgment_bytes(prof, s, world=world, copies=copies)
    more_rows = footprint.judgment_bytes(dataclasses.replace(prof, test_rows=rows + [65]), s, world=world,
                                    copies=copies)
    more_budget = footprint.judgment_bytes(prof, _cpu(snapshot_budget_mb=budget + 1)[0], world=world,
                                      copies=copies)
    assert more_rows.tap > base.tap and more_budget.tap > base.tap
    assert base.kept == budget * MIB * world and base.need > base.peak >= base.tap
    assert footprint.judgment_bytes(prof, s, world=world, copies=True).tap >= base.tap


# --------------------------------------------------------------------------- room before a judgment
def test_a_folder_short_of_room_is_named_with_expected_and_found_bytes():
    tap = footprint.Space("/r/runs/tap", 100 * MIB, device=1, free=140 * MIB)
    bench = footprint.Space("/r/runs/bench", 10 * MIB, device=1, free=140 * MIB)
    assert footprint.shortfall([tap, bench]) is None  # one after the other: the larger + margin
    short = footprint.shortfall([footprint.Space(tap.folder, 100 * MIB, 1, 100 * MIB), bench])
    assert short == footprint.Space("/r/runs/tap", 100 * MIB + footprint.MARGIN_MIN, 1, 100 * MIB)
    # on another device the scorer's folder has its own room
    assert footprint.shortfall([tap, footprint.Space(bench.folder, 10 * MIB, 2, 1 * MIB)]).folder == bench.folder
    text = footprint.short_message(short)
    assert text.startswith(f"environment: disk: /r/runs/tap has {100 * MIB} bytes free")
    assert f"up to {100 * MIB + footprint.MARGIN_MIN} bytes" in text and "the operator must free space" in text


def test_check_raises_a_named_disk_short(tmp_path, monkeypatch):
    monkeypatch.setattr(disk, "free_bytes", lambda folder: 5)
    with pytest.raises(footprint.DiskShort, match=r"^environment: disk: .*/runs/tap has 5 bytes free") as e:
        disk.check({tmp_path / "runs" / "tap": 1000})  # not made yet: its nearest folder's disk
    assert (e.value.need, e.value.free) == (1000 + footprint.MARGIN_MIN, 5)


# --------------------------------------------------------------------------- a side that ran out
@pytest.mark.parametrize("tail,free,full", [
    ("RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534", 0, True),
    ("OSError: [Errno 28] No space left on device: '/r/runs/tap/x/result.json'", 4096, True),
    # the words alone are not believed: the launcher measured room in the folder
    ("OSError: [Errno 28] No space left on device", 10 * footprint.LOW_BYTES, False),
    ("RuntimeError: situ kernel refused", 0, False),
    ("unexpected pos 576 vs 534", None, False),
])
def test_a_side_ran_out_of_disk_only_when_its_log_and_its_folder_say_so(tail, free, full):
    assert footprint.ran_out(tail, free) is full


def test_the_launcher_names_a_full_disk_and_the_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(disk, "free_bytes", lambda folder: 0)
    kind, tail = disk.classified("error", "Traceback\nRuntimeError: unexpected pos 576 vs 534", tmp_path)
    assert kind == DISK_FULL and tail.splitlines()[-1] == \
        f"environment: disk: no space left on the disk holding {tmp_path} (0 bytes free there after the side's write failed)"
    for kind in ("ok", "timeout", "tampered"):
        assert disk.classified(kind, "unexpected pos", tmp_path) == (kind, "unexpected pos")


# --------------------------------------------------------------------------- the recordings
def _recording(tap, name):
    d = tap / name
    (d / "rank1").mkdir(parents=True)
    for p in (d / "logits_a.pt", d / "kept_a.pt", d / "rank1" / "kept_a.pt", d / "record.json", d / "record.log"):
        p.write_text("x")
    return d


def test_a_released_recording_loses_its_tensors_and_keeps_its_documents(tmp_path):
    tap = tmp_path / "tap"
    with disk.Recordings(tap) as held:
        held.hold(tap / "main-key")
        d = _recording(tap, "main-key")
        stale = _recording(tap, "main-old-failed-20261204-010203-000001")  # a killed run's
        left = sorted(stale.rglob("*.pt"))
        assert sorted(disk.sweep(tap)) == left and len(left) == 3 and not list(stale.rglob("*.pt"))
        assert len(list(d.rglob("*.pt"))) == 3  # held: another judgment's sweep leaves it
    assert not list(tap.rglob("*.pt"))
    assert sorted(p.name for p in d.iterdir()) == ["rank1", "record.json", "record.log"]


def test_two_judgments_on_one_recording_the_last_to_finish_deletes_it(tmp_path):
    tap = tmp_path / "tap"
    first, second = disk.Recordings(tap), disk.Recordings(tap)
    first.hold(tap / "main-key")
    second.hold(tap / "main-key")
    d = _recording(tap, "main-key")
    assert first.release() == [] and len(list(d.rglob("*.pt"))) == 3
    assert len(second.release()) == 3 and not list(d.rglob("*.pt"))


def test_a_sweep_does_not_follow_a_link_out_of_a_candidates_folder(tmp_path):
    tap, elsewhere = tmp_path / "tap", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "weights.pt").write_text("x")
    (tap / "cand-vs-main").mkdir(parents=True)
    (tap / "cand-vs-main" / "logits_b.pt").write_text("x")
    os.symlink(elsewhere, tap / "cand-vs-main" / "link")
    assert disk.sweep(tap) == [tap / "cand-vs-main" / "logits_b.pt"]
    assert (elsewhere / "weights.pt").exists()


# --------------------------------------------------------------------------- last words
def test_last_words_are_the_last_lines_of_a_side_that_failed():
    tail = "loading\n\nrows 8: step 0\nTraceback\n  File x\nRuntimeError: unexpected pos 5 vs 3\n"
    assert last_lines(tail, 2) == ("  File x", "RuntimeError: unexpected pos 5 vs 3")
    w = LastWords.of("A record", "error", tail, "/r/runs/tap/x/record.log")
    assert w.last == "RuntimeError: unexpected pos 5 vs 3" and len(w.lines) == 4
    assert LastWords.from_dict(w.to_dict()) == w
    assert str(w) == "A record ended with error: RuntimeError: unexpected pos 5 vs 3 (log /r/runs/tap/x/record.log)"
    assert LastWords.of("B replay", "ok", tail) is None and LastWords.of("B replay", "not run", "") is None


def _test_report(a="ok", b="ok", words=()):
    return {"verdict": "INCONCLUSIVE" if a != "ok" else "FAIL", "reasons": ["a side ended"],
            "evidence": {"outcome_a": a, "outcome_b": b}, "last_words": [w.to_dict() for w in words]}


def test_a_side_that_ran_out_of_disk_is_the_environments_and_its_words_reach_the_row():
    full = LastWords("A record", DISK_FULL, ("RuntimeError: unexpected pos 576 vs 534",
                                             "environment: disk: no space left on the disk holding /r/runs/tap/x"),
                     "/r/runs/tap/x/record.log")
    test = AccuracyResult.of(_test_report(a=DISK_FULL, b="not run", words=[full]))
    d = D.decide(True, test, None)
    assert d.state == D.CRASHED and d.reason == (
        "environment: disk: accuracy gate's A record ran out of disk space writing /r/runs/tap/x: "
        "the operator must free space on the disk holding runs/, then judge it again")
    gate = summarize(d, [], test, None)
    assert gate.last_words == full
    assert GateSummary.from_dict(gate.to_dict()) == gate and gate.to_dict()["last_words"]["kind"] == DISK_FULL
    # the scorer's side too, and a crash that is not the disk's keeps its own reason
    bench = BenchResult.of({"outcome": DISK_FULL, "error": "sideB: unexpected pos", "log": "/r/b/sideB.log",
                            "last_words": {"side": "side B", "kind": DISK_FULL, "lines": ["x"], "log": "/r/b/sideB.log"}})
    ok = AccuracyResult.of({"verdict": "PASS bit-identical", "reasons": [], "evidence": {}})
    d = D.decide(True, ok, bench)
    assert d.reason.startswith("environment: disk: scorer's side B ran out of disk space writing /r/b")
    assert summarize(d, [], ok, bench).last_words.side == "side B"
    crash = LastWords("B replay", "crash (signal SIGKILL)", ("tap: rows 8",), "/r/t/result.log")
    test = AccuracyResult.of(_test_report(b="crash (signal SIGKILL)", words=[crash]))
    d = D.decide(True, test, None)
    assert d.reason == "kern test: the candidate's side ended with crash (signal SIGKILL)"
    assert summarize(d, [], test, None).last_words == crash


def test_a_report_written_before_last_words_gives_them_from_its_tails():
    old = {"verdict": "FAIL", "reasons": ["x"], "evidence": {"outcome_a": "ok", "outcome_b": "error"},
           "b_log_tail": "Traceback\nRuntimeError: boom", "b_dir": "/r/runs/tap/c-vs-m"}
    (w,) = AccuracyResult.of(old).last_words
    assert (w.side, w.kind, w.last, w.log) == ("B replay", "error", "RuntimeError: boom", "/r/runs/tap/c-vs-m")


def test_a_full_disk_while_keeping_a_judgments_evidence_is_environment_disk(tmp_path, monkeypatch):
    """The judgment's evidence file meets a full disk: a named ``environment: disk`` reason,
    no half-written judgment file (the pipeline's write, not a side's)."""
    from pathlib import Path

    from harness.pipeline import keep_evidence

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(footprint.DiskShort) as e:
        keep_evidence(tmp_path, 7, None, None)
    assert str(e.value).startswith(footprint.REASON) and "judgment-1.json" in str(e.value)
    assert list((tmp_path / "attempts" / "7").iterdir()) == []
