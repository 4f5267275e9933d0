"""Where a judgment's time went (gates/rules/phases.py): a side's spans from its wall and what it
measured itself, a gate's rest, and a whole judgment's times read from its file, the real
H200 judgment kept before phases were recorded among them; and the side's own clock
(gates/side/clock.py), which takes Triton's compiles out of the span they fell in."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from gates.protocol import SidePhases
from gates.rules.phases import Beside, JudgmentTimes, Span, rest, side_spans, split_at_hand_over
from gates.side.clock import CompileClock, PhaseClock

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "bench/results/2026-12-01-h200-kern-try-experts-judgment.json"

seconds = st.floats(min_value=0.0, max_value=1e4, allow_nan=False)


@given(build=seconds, compile_=seconds, tap=seconds, save=seconds, wait=seconds, extra=seconds)
def test_a_sides_spans_fill_its_wall_less_its_wait(build, compile_, tap, save, wait, extra):
    """Whatever a side measured, its spans add up to its wall less the time it waited on the
    other side (counted where that work ran), ``start`` taking what it did not measure."""
    ph = SidePhases(driver_s=build + compile_ + tap + save + wait, build_s=build, compile_s=compile_,
                    tap_s=tap, save_s=save, wait_s=wait)
    wall = build + compile_ + tap + save + wait + extra
    spans = side_spans("accuracy", "A record", wall, ph.to_dict())
    assert abs(sum(s.seconds for s in spans) - (wall - wait)) <= 1e-6 * max(1.0, wall)
    assert spans[0].phase == "start" and abs(spans[0].seconds - extra) <= 1e-6 * max(1.0, wall)
    assert all(s.seconds > 0 for s in spans[1:]) and "wait" not in {s.phase for s in spans}


def test_a_tap_side_that_leased_the_stores_weights_says_attach_not_build():
    """A tap side attached to the model store's weights (its own state built) reports that
    time as ``attach``; split at its hand-over, the attach is beside, as a build would be."""
    ph = SidePhases(driver_s=9.0, attach_s=3.0, tap_s=5.0)
    spans = side_spans("accuracy", "B replay", 10.0, ph.to_dict())
    assert [(s.phase, s.seconds) for s in spans] == [("start", 2.0), ("attach", 3.0), ("tap", 5.0)]
    before = SidePhases(driver_s=4.0, attach_s=3.0)
    path, beside = split_at_hand_over("accuracy", "B replay", 10.0, ph, before, None)
    assert "attach" not in {s.phase for s in path} and ("attach", 3.0) in {(s.phase, s.seconds) for s in beside}


@given(start=seconds, build=seconds, held=seconds, tap=seconds, save=seconds, kept=seconds, extra=seconds)
def test_a_replay_beside_mains_recording_splits_at_its_hand_over(start, build, held, tap, save, kept, extra):
    """The candidate's replay, started beside main's record side: what it did before its
    hidden inputs came (its start, its build; its wait for them left out) is beside, the
    rest on the gate's path; together they are its wall less its waits."""
    before = SidePhases(driver_s=start + build + held, build_s=build, wait_s=held)
    whole = SidePhases(driver_s=before.driver_s + tap + save + kept, build_s=build, tap_s=tap,
                       save_s=save, wait_s=held + kept)
    wall = extra + whole.driver_s
    path, beside = split_at_hand_over("accuracy", "B replay", wall, whole.to_dict(), before.to_dict(), None)
    tol = 1e-6 * max(1.0, wall)
    assert abs(sum(s.seconds for s in path) - (tap + save)) <= tol
    assert abs(sum(s.seconds for s in beside) - (extra + start + build)) <= tol
    assert "build" not in {s.phase for s in path} and "tap" not in {s.phase for s in beside}
    assert {s.part for s in path + beside} <= {"B replay"}


def test_a_replay_that_reported_no_phases_splits_its_wall_at_its_release():
    path, beside = split_at_hand_over("accuracy", "B replay", 30.0, None, None, 12.0)
    assert path == [Span("accuracy", "B replay", "unmeasured", 18.0)]
    assert beside == [Span("accuracy", "B replay", "unmeasured", 12.0)]
    never = split_at_hand_over("accuracy", "B replay", 30.0, None, None, None)
    assert never == ([], [Span("accuracy", "B replay", "unmeasured", 30.0)])


def _beside_report(b_at: float, start: float, build: float, held: float, recorded: float | None,
                   tap: float, released: bool = True) -> dict:
    """An accuracy report as gates/accuracy.py leaves it for a replay started ``b_at`` s after
    main's record side (which said RECORDED at ``recorded``; None: never): B's own phases
    split at its hand-over, the path's spans (A's, B's after it, the coordinator's rest)
    adding up to the gate's wall, and the timeline."""
    before = SidePhases(driver_s=build + held, build_s=build, wait_s=held)
    whole = SidePhases(driver_s=before.driver_s + tap, build_s=build, tap_s=tap, wait_s=held)
    wall_b = start + whole.driver_s
    hand = b_at + start + build + held
    path, beside = split_at_hand_over("accuracy", "B replay", wall_b, whole.to_dict() if released else None,
                                      before.to_dict() if released else None, hand - b_at if released else None)
    spans = [Span("accuracy", "A record", "tap", recorded or 0.0)] + (path if released else [])
    wall = max(recorded or 0.0, b_at + wall_b) + 0.5  # B's path runs after its release
    spans += rest("accuracy", wall, spans)
    return {"wall_s": wall, "phases": [x.to_dict() for x in spans], "beside": [x.to_dict() for x in beside],
            "timeline": {"a_started": 0.0, "a_recorded": recorded, "b_started": b_at,
                         "b_released": hand if released else None}}


@given(b_at=st.floats(0.0, 5.0), start=seconds, build=seconds, recorded=seconds, tap=seconds)
def test_what_ran_beside_mains_recording_is_kept_with_how_much_of_it_main_covered(b_at, start, build, recorded, tap):
    """The candidate's start and build, off the gate's path: what of them ran while main was
    still recording (``overlap_s``) and what after (``after_s``: they held up its release);
    together they are that work, and the path's spans still add up to the gate's wall."""
    held = max(0.0, recorded - (b_at + start + build))  # the replay waits for main's RECORDED
    r = _beside_report(b_at, start, build, held, recorded, tap)
    t = JudgmentTimes.of(r, None, None)
    tol = 1e-6 * max(1.0, r["wall_s"])
    assert abs(sum(t.by_phase("accuracy").values()) - t.accuracy_s) <= tol
    (b,) = t.beside
    assert (b.gate, b.part, b.of) == ("accuracy", "B replay", "A record")
    assert abs(b.seconds - (start + build)) <= tol and "tap" not in b.by_phase()
    assert abs(b.overlap_s - max(0.0, min(start + build, recorded - b_at))) <= tol
    assert abs(b.overlap_s + b.after_s - b.seconds) <= tol and b.after_s >= -tol
    assert t.overlap_s == b.overlap_s
    assert JudgmentTimes.from_dict(json.loads(json.dumps(t.to_dict()))) == t


def test_a_replay_ended_with_a_base_that_never_recorded_ran_wholly_beside_it():
    """Main's side failed to record: the replay was ended with it, unreleased; its whole wall
    ran beside main's side (an ``unmeasured`` span, no ``after``)."""
    r = _beside_report(0.2, 3.0, 9.0, 4.0, None, 0.0, released=False)
    (b,) = JudgmentTimes.of(r, None).beside
    assert b.by_phase() == {"unmeasured": 16.0} and b.released_s is None and b.of_done_s is None
    assert (b.overlap_s, b.after_s) == (16.0, 0.0)


def test_a_replay_that_failed_at_import_before_main_recorded_ran_beside_it():
    r = _beside_report(0.2, 3.0, 0.0, 0.0, 40.0, 0.0, released=False)  # ended 3.2 s in
    (b,) = JudgmentTimes.of(r, None).beside
    assert b.by_phase() == {"unmeasured": 3.0} and (b.overlap_s, b.after_s) == (3.0, 0.0)


def test_reports_and_times_kept_before_beside_still_load():
    """The ledger holds judgments of every version: a report with no ``beside`` (the replay
    started after main's recording) has nothing beside; times kept before they carried
    ``beside`` take it from their accuracy report; spans without a timeline have no overlap."""
    doc = json.loads(H200.read_text())
    t = JudgmentTimes.of_judgment(doc)
    assert t.beside == () and t.overlap_s is None
    r = _beside_report(0.5, 2.0, 10.0, 20.0, 32.5, 5.0)
    old = JudgmentTimes.of(r, None, 40.0).to_dict()
    del old["beside"]
    got = JudgmentTimes.of_judgment({"test": r, "bench": None, "times": old})
    assert got == JudgmentTimes.of(r, None, 40.0) and got.beside[0].overlap_s == 12.0
    bare = Beside.from_dict({"gate": "accuracy", "part": "B replay", "of": "A record",
                             "spans": [Span("accuracy", "B replay", "build", 4.0).to_dict()]})
    assert (bare.seconds, bare.overlap_s, bare.after_s) == (4.0, None, None)


def test_a_side_without_phases_is_one_unmeasured_span():
    assert side_spans("accuracy", "B replay", 12.5, None) == [Span("accuracy", "B replay", "unmeasured", 12.5)]
    assert side_spans("accuracy", "B replay", 0.0, None) == []  # never started


def test_the_coordinators_rest_is_what_no_span_took():
    spans = [Span("accuracy", "A record", "tap", 4.0), Span("scorer", "A", "build", 50.0)]
    assert rest("accuracy", 10.0, spans) == [Span("accuracy", "coordinator", "other", 6.0)]
    assert rest("accuracy", 3.0, spans) == []


def test_times_travel_as_json_and_sum_by_phase_and_part():
    t = JudgmentTimes(10.0, 20.0, None, 31.0, (
        Span("accuracy", "A record", "tap", 4.0), Span("accuracy", "B replay", "tap", 3.0),
        Span("accuracy", "B replay", "start", 1.0), Span("scorer", "rounds", "rounds", 15.0)))
    assert JudgmentTimes.from_dict(json.loads(json.dumps(t.to_dict()))) == t
    assert t.by_phase() == {"start": 1.0, "tap": 7.0, "rounds": 15.0}
    assert t.by_phase("accuracy") == {"start": 1.0, "tap": 7.0}
    assert t.by_part("accuracy") == {"A record": {"tap": 4.0}, "B replay": {"start": 1.0, "tap": 3.0}}
    assert JudgmentTimes.of_judgment({"test": None, "bench": None, "times": t.to_dict()}) == t


def test_a_judgment_kept_before_phases_shows_what_its_reports_hold():
    """The H200 judgment of attempt 4 (2026-12-01): each gate's wall, each side's wall as one
    unmeasured span, the scorer's builds, captures and rounds; no total (it was not kept)."""
    doc = json.loads(H200.read_text())
    t = JudgmentTimes.of_judgment(doc)
    assert (t.accuracy_s, t.scorer_s, t.remeasure_s, t.total_s) == (
        doc["test"]["wall_s"], doc["bench"]["wall_s"], doc["bench"]["reverify"]["wall_s"], None)
    acc = t.by_part("accuracy")
    assert acc["A record"] == {"unmeasured": doc["test"]["a_wall_s"]}
    assert acc["A noise"] == {"unmeasured": doc["test"]["noise_wall_s"]}
    assert abs(sum(t.by_phase("accuracy").values()) - doc["test"]["wall_s"]) < 1e-6
    for gate, rep in (("scorer", doc["bench"]), ("remeasure", doc["bench"]["reverify"])):
        assert abs(sum(t.by_phase(gate).values()) - rep["wall_s"]) < 1e-6
        assert t.by_phase(gate)["rounds"] > 0 and t.by_part(gate)["A"]["build"] > 0


def test_the_side_clock_takes_compiles_out_of_their_span(monkeypatch):
    """Triton's listener reports each compile's microseconds; the span it fell in loses them
    and the compile phase gets them, with the count of kernels compiled and loaded."""
    now = [100.0]
    monkeypatch.setattr("gates.side.clock.time.monotonic", lambda: now[0])
    compiler = CompileClock()
    compiler.installed = True  # as install() leaves it where Triton has the listener
    clock = PhaseClock(compiler, start=now[0])
    with clock.span("tap"):
        now[0] += 10.0
        compiler(src=None, metadata={}, metadata_group={}, times=SimpleNamespace(total=4_000_000),
                 cache_hit=False)
        compiler(src=None, metadata={}, metadata_group={}, times=SimpleNamespace(total=500_000),
                 cache_hit=True)
    with clock.span("save"):
        now[0] += 1.0
    got = clock.phases()
    assert (got.tap_s, got.compile_s, got.save_s, got.driver_s) == (5.5, 4.5, 1.0, 11.0)
    assert (got.compiled, got.loaded) == (1, 1)
    assert SidePhases.from_dict(got.to_dict()) == got


def test_a_triton_without_the_listener_reports_no_compile_time():
    clock = PhaseClock(CompileClock())  # never installed: the figure is unknown, not zero
    assert clock.phases().compile_s is None
