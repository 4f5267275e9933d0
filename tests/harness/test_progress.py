"""Progress of kern test / kern bench / kern loop: the gates' and the loop's typed events read
into bars and stages (harness/progress.py), the lines they read as, and the CLI shell that
draws them on a terminal."""
from __future__ import annotations

import io
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from gates.accuracy import _tagged  # what run_test's progress callback receives
from gates.events import JudgingTimedOutputs, PassTick, SideEnded, SideReady, StoreReady, VisitDone
from gates.scorer import pattern
from harness.cli import judge
from harness import progress as P


def bench_lines(rounds: int) -> list:
    """The events run_bench emits for an A/B of ``rounds`` rounds (gates/scorer.py)."""
    out = [StoreReady(12.2), SideReady("A", 0.1, 3.0), SideReady("B", 0.0, 4.4)]
    for i, k in enumerate(pattern(rounds)):
        out.append(VisitDone(i // 4 + 1, k))
        if i == len(pattern(rounds)) - 1:
            out.append(JudgingTimedOutputs())
    return out


def test_each_event_reads_as_the_line_the_gates_print():
    assert [str(e) for e in bench_lines(1)] == [
        "store: model built in 12s, shared over CUDA IPC", "side A: ready (build 0s, capture 3s)",
        "side B: ready (build 0s, capture 4s)", "round 1: side A done", "round 1: side B done",
        "round 1: side B done", "round 1: side A done", "judging the timed outputs against main's"]
    assert str(SideReady("B", 1, 2, 2)) == "side B: ready (build 1s, capture 2s), process 2 (sides alternate)"
    assert str(PassTick("A record", 7.4, "tap: rows 16")) == "A record     7s  tap: rows 16"
    assert [str(e) for e in (P.GateStarted("accuracy", "abcdef0123" * 4, "1234567890" * 4),
                             P.AccuracyVerdict("PASS bit-identical"),
                             P.GateStarted("scorer", "abcdef0123" * 4, "1234567890" * 4),
                             P.InScorer(VisitDone(1, "B")), P.InScorer(SideReady("B", 1, 1), again=True),
                             P.Remeasuring("abcdef0123" * 4, 15.0), P.Rebased(3, "fedcba9876" * 4),
                             P.AttemptEnded(3, "merged"), P.AttemptEnded(4, "abandoned", "guard"))] == [
        "accuracy gate: abcdef0123 vs 1234567890", "accuracy: PASS bit-identical",
        "scorer: abcdef0123 vs 1234567890", "  round 1: side B done",
        "  again: side B: ready (build 1s, capture 1s)",
        "scorer: a gain above 15 %: measuring abcdef0123 again",
        "attempt #3: main moved; rebased onto fedcba9876, judging again", "attempt #3: merged",
        "attempt #4: abandoned: guard"]


def test_bench_bars_follow_the_rounds():
    bars = P.bench_bars(pattern(3), 3)
    assert [(b.key, b.done, b.total) for b in bars] == [("A", 0, 6), ("B", 0, 6)]
    lines, printed = bench_lines(3), []
    for i, line in enumerate(lines):
        bars, moved = P.bench_step(bars, line, 3)
        if not moved:
            printed.append(line)
        if line == VisitDone(2, "B") and bars[1].done == 4:
            assert bars[1].detail == "round 2/3" and not bars[1].finished
    assert printed == [StoreReady(12.2)]
    a, b = bars
    assert (a.done, a.finished, a.detail) == (6, True, "judging the timed outputs against main's")
    assert (b.done, b.finished, b.detail) == (6, True, "round 3/3")


def test_bench_bars_of_b_alone_and_a_ready_line():
    bars = P.bench_bars(["B"] * 2, 2)
    assert [(b.key, b.total) for b in bars] == [("B", 2)]
    bars, moved = P.bench_step(bars, SideReady("B", 1, 2), 2)
    assert moved and bars[0].detail == "round 1/2: ready (build 1s, capture 2s)"
    bars, _ = P.bench_step(bars, VisitDone(1, "B"), 2)
    bars, moved = P.bench_step(bars, SideReady("B", 1, 2, process=2), 2)
    assert bars[0].detail == "round 1/2: ready (build 1s, capture 2s), process 2 (sides alternate)"
    assert P.bench_step(bars, VisitDone(1, "Z"), 2) == (bars, False)  # no such side
    assert P.bench_step(bars, "round 1: side B done", 2) == (bars, False)  # a line is no event


def test_test_bars_follow_the_passes():
    lines = []
    for tag, t, text in [("A record", 2, "building the model"), ("A record", 7, "tap: rows 16"),
                         ("B replay", 3, "replaying rows 16"), ("A noise", 5, "noise pass 1")]:
        _tagged(lines.append, tag)(text, t)
    bars = ()
    for line in lines:
        bars, moved = P.test_step(bars, line)
        assert moved
    assert [(b.key, b.finished, b.detail, b.elapsed_s) for b in bars] == [
        ("A record", True, "tap: rows 16", 7.0), ("B replay", True, "replaying rows 16", 3.0),
        ("A noise", False, "noise pass 1", 5.0)]
    assert bars[0].label == "side A: main records its tap" and bars[0].total is None
    assert P.test_step(bars, "A noise     9s  a line, not an event") == (bars, False)
    assert P.test_step(bars, VisitDone(1, "A")) == (bars, False)
    assert all(b.finished for b in P.finish(bars))
    early = P.finish(P.bench_step(P.bench_bars(pattern(1), 1), VisitDone(1, "A"), 1)[0])
    assert [(b.done, b.total, b.finished) for b in early] == [(1, 2, True), (0, 2, True)]


def test_gate_progress_plain_when_not_a_terminal():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False)
    seen = []
    with judge.gate_progress(console, P.bench_bars(pattern(1), 1),
                                lambda b, l: P.bench_step(b, l, 1), seen.append) as show:
        for line in bench_lines(1):
            show(line)
    assert seen == bench_lines(1) and buf.getvalue() == ""


def test_gate_progress_draws_bars_on_a_terminal():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system=None)
    plain = []
    with judge.gate_progress(console, P.bench_bars(pattern(2), 2),
                                lambda b, l: P.bench_step(b, l, 2), plain.append) as show:
        for line in bench_lines(2):
            show(line)
    out = buf.getvalue()
    assert plain == []  # the terminal gets bars, not the plain lines
    assert "side A" in out and "side B" in out and "4/4" in out, out
    assert "… store: model built in 12s" in out  # a line that moves no bar is printed above
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system=None)
    with judge.gate_progress(console, (), P.test_step, plain.append) as show:
        _tagged(show, "A record")("building", 4)
        _tagged(show, "B replay")("replaying", 2)
    assert "side A: main records its tap" in buf.getvalue()
    assert "side B: the candidate replays it" in buf.getvalue()


def test_stage_of_the_loop_events():
    rev, base = "abcdef0123" * 4, "1234567890" * 4
    lines = [(0.0, P.GateStarted("accuracy", rev, base)), (5.0, P.AccuracyVerdict("PASS bit-identical")),
             (6.0, P.GateStarted("scorer", rev, base)), (9.0, P.InScorer(SideReady("A", 1, 1))),
             (20.0, P.InScorer(VisitDone(1, "B"))), (21.0, "farm.isolate: waiting for another judgment")]
    st = P.stage_of(lines)
    assert st == P.Stage(rev, "scorer", "round 1: side B done", 6.0, 20.0)
    assert P.stage_of(lines[:2]) == P.Stage(rev, "accuracy", "PASS bit-identical", 0.0, 5.0)
    again = lines + [(30.0, P.Remeasuring(rev, 15)), (31.0, P.InScorer(SideReady("B", 1, 1), again=True))]
    assert P.stage_of(again) == P.Stage(rev, "scorer (again)",
                                        "side B: ready (build 1s, capture 1s)", 30.0, 31.0)
    assert P.stage_of(lines + [(40.0, P.AttemptEnded(3, "merged"))]) is None
    assert P.stage_of(lines + [(40.0, P.Rebased(3, base))]) is None
    assert P.stage_of([(0.0, "profiling main 1234567890 at 16 rows")]) is None
    # a side that ended badly: its last words are the stage until the attempt's end is recorded
    died = lines[:2] + [(7.0, SideEnded("accuracy gate", "B replay", "crash (signal SIGKILL)",
                                        "tap: rows 17, step 0", "/r/runs/tap/x/result.log"))]
    assert P.stage_of(died) == P.Stage(rev, "accuracy", "B replay ended with crash (signal SIGKILL): "
                                                        "tap: rows 17, step 0", 0.0, 7.0)
    assert str(died[-1][1]) == ("accuracy gate: B replay ended with crash (signal SIGKILL): tap: rows 17, "
                                "step 0 (log /r/runs/tap/x/result.log)")


@pytest.mark.parametrize("s, text", [(None, ""), (0.4, "0s"), (42, "42s"), (185, "3m05s"),
                                     (7620, "2h07m")])
def test_fmt_elapsed(s, text):
    assert P.fmt_elapsed(s) == text


@given(st.integers(0, 10**7))
def test_fmt_duration_writes_the_two_largest_units_in_either_style(s):
    """The one formatter behind the live view's ``3m05s`` and the page's and kern show's
    ``3 min 05 s``: the parts add up to ``s`` (to the minute from an hour on)."""
    text = P.fmt_duration(s, ("s", "min", "h"), " ")
    words = text.split(" ")
    value = sum(int(n) * {"s": 1, "min": 60, "h": 3600}[u] for n, u in zip(words[0::2], words[1::2]))
    assert value == (s if s < 3600 else s - s % 60) and len(words) in (2, 4)
    assert P.fmt_duration(s) == text.replace("min", "m").replace(" ", "")


def test_live_rows_show_each_attempts_gate_stage_and_elapsed(tmp_path):
    from datetime import datetime, timezone

    from harness.journey import result
    from harness.ledger import Attempt

    t0 = datetime(2026, 1, 10, 8, 0, tzinfo=timezone.utc).timestamp()
    stamp = "2026-01-10T08:00:00+00:00"
    atts = [Attempt(1, state="merged", target="moe.experts", delta_ms=-0.35, updated_at=stamp),
            Attempt(2, state="judging", target="mla.decode", commit_sha="abcdef0123" + "0" * 30,
                    updated_at=stamp),
            Attempt(3, state="judging", target="kda", commit_sha="9" * 40, updated_at=stamp),
            Attempt(4, state="running", target="lm_head", updated_at=stamp),
            Attempt(5, state="queued", target="dense", updated_at="not a time"),
            Attempt(6, state="waiting", target="dense", waiting_on=4, updated_at=stamp)]
    stage = P.Stage("abcdef0123", "scorer", "round 1: side B done", t0 + 60, t0 + 100)
    rows = P.live_rows(atts, stage, t0 + 125, result)
    assert rows == [
        ("1", "moe.experts", "merged", "", "", "merged (\u22120.35)"),
        ("2", "mla.decode", "judging", "scorer · round 1: side B done", "1m05s", ""),
        ("3", "kda", "judging", "judging", "2m05s", ""),  # judged by no gate we have a line of
        ("4", "lm_head", "running", "agent at work", "2m05s", ""),
        ("5", "dense", "queued", "waiting for a slot", "", ""),  # no time to count from
        ("6", "dense", "waiting", "waiting on #4", "2m05s", ""),
    ]


def test_the_loop_live_view_renders_from_the_ledger(tmp_path):
    """The live view's table from a real ledger (the sample's) and the loop's progress lines;
    the repository is reduced to the one thing the view asks of it, main's SHA."""
    from types import SimpleNamespace

    from harness.cli.loop import _LiveView

    from . import sample

    led = sample.build(tmp_path / "ledger.sqlite")
    lines = [(0.0, P.GateStarted("accuracy", "c000000000013", "base000000001"))]
    from harness.settings import Budgets

    budgets = Budgets(attempts=50, tokens=2_000_000, wall_hours=72, cost_usd=50.0)
    view = _LiveView(SimpleNamespace(ledger=led, repo=SimpleNamespace(main_sha=lambda: "f" * 40),
                                     cfg=SimpleNamespace(budgets=budgets)), lines, time.monotonic())
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(view)
    out = buf.getvalue()
    assert "kern loop · main ffffffffff" in out and "gate · stage" in out
    assert "agent at work" in out and "waiting on #13" in out and "main score: 51.200 ms" in out
    assert "budgets: attempts 15 / 50 · tokens 65000 / 2000000 · cost $0.65 / $50.00" in out
    assert "tick running" in out
    led.close()
