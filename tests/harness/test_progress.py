"""Progress of kern test / kern bench / kern loop: the gates' own progress lines read into bars
and stages (harness/progress.py), and the CLI shell that draws them on a terminal."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from gates.accuracy import _tagged  # the line format run_test's progress callback receives
from gates.bench import pattern
from harness import commands
from harness import progress as P


def bench_lines(rounds: int) -> list[str]:
    """The lines run_bench emits for an A/B of ``rounds`` rounds (gates/bench.py)."""
    out = ["store: model built in 12s, shared over CUDA IPC",
           "side A: ready (build 0s, capture 3s)", "side B: ready (build 0s, capture 4s)"]
    for i, k in enumerate(pattern(rounds)):
        out.append(f"round {i // 4 + 1}: side {k} done")
        if i == len(pattern(rounds)) - 1:
            out.append("judging the timed outputs against main's")
    return out


def test_bench_bars_follow_the_rounds():
    bars = P.bench_bars(pattern(3), 3)
    assert [(b.key, b.done, b.total) for b in bars] == [("A", 0, 6), ("B", 0, 6)]
    lines, printed = bench_lines(3), []
    for i, line in enumerate(lines):
        bars, moved = P.bench_step(bars, line, 3)
        if not moved:
            printed.append(line)
        if line == "round 2: side B done" and bars[1].done == 4:
            assert bars[1].detail == "round 2/3" and not bars[1].finished
    assert printed == ["store: model built in 12s, shared over CUDA IPC"]
    a, b = bars
    assert (a.done, a.finished, a.detail) == (6, True, "judging the timed outputs against main's")
    assert (b.done, b.finished, b.detail) == (6, True, "round 3/3")


def test_bench_bars_of_b_alone_and_a_ready_line():
    bars = P.bench_bars(["B"] * 2, 2)
    assert [(b.key, b.total) for b in bars] == [("B", 2)]
    bars, moved = P.bench_step(bars, "side B: ready (build 1s, capture 2s)", 2)
    assert moved and bars[0].detail == "round 1/2: ready (build 1s, capture 2s)"
    bars, _ = P.bench_step(bars, "round 1: side B done", 2)
    bars, moved = P.bench_step(bars, "side B: ready (build 1s, capture 2s), process 2 (sides alternate)", 2)
    assert bars[0].detail == "round 1/2: ready (build 1s, capture 2s), process 2 (sides alternate)"
    assert P.bench_step(bars, "round 1: side Z done", 2) == (bars, False)  # no such side


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
    assert P.test_step(bars, "something else") == (bars, False)
    assert all(b.finished for b in P.finish(bars))
    early = P.finish(P.bench_step(P.bench_bars(pattern(1), 1), "round 1: side A done", 1)[0])
    assert [(b.done, b.total, b.finished) for b in early] == [(1, 2, True), (0, 2, True)]


def test_gate_progress_plain_when_not_a_terminal():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False)
    seen = []
    with commands.gate_progress(console, P.bench_bars(pattern(1), 1),
                                lambda b, l: P.bench_step(b, l, 1), seen.append) as show:
        for line in bench_lines(1):
            show(line)
    assert seen == bench_lines(1) and buf.getvalue() == ""


def test_gate_progress_draws_bars_on_a_terminal():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system=None)
    plain = []
    with commands.gate_progress(console, P.bench_bars(pattern(2), 2),
                                lambda b, l: P.bench_step(b, l, 2), plain.append) as show:
        for line in bench_lines(2):
            show(line)
    out = buf.getvalue()
    assert plain == []  # the terminal gets bars, not the plain lines
    assert "side A" in out and "side B" in out and "4/4" in out, out
    assert "… store: model built in 12s" in out  # a line that moves no bar is printed above
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system=None)
    with commands.gate_progress(console, (), P.test_step, plain.append) as show:
        _tagged(show, "A record")("building", 4)
        _tagged(show, "B replay")("replaying", 2)
    assert "side A: main records its tap" in buf.getvalue()
    assert "side B: the candidate replays it" in buf.getvalue()


@pytest.mark.parametrize("s, text", [(None, ""), (0.4, "0s"), (42, "42s"), (185, "3m05s"),
                                     (7620, "2h07m")])
def test_fmt_elapsed(s, text):
    assert P.fmt_elapsed(s) == text

