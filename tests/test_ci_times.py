"""bench/tools/ci_times.py reads a `.ci/run` output into its two pytest phases and the slow
phase's duration table, and refuses an output cut short."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ci_times", ROOT / "bench" / "tools" / "ci_times.py")
ci_times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ci_times)

OUTPUT = """\
........ [ 99%]
790 passed, 19 skipped, 14 warnings in 86.73s (0:01:26)
bringing up nodes...
============================= slowest 15 durations =============================
1054.83s setup    tests/harness/test_loop.py::test_replay_patches_reach_every_outcome
29.34s call     tests/gates/test_rank_gates.py::test_bench_fails_a_candidate[on some replays]
=========================== short test summary info ============================
FAILED tests/gates/test_bench.py::test_the_ab_shapes_stay_decided_on_a_loaded_machine
======== 1 failed, 66 passed, 10 skipped in 1847.49s (0:30:47) ========
"""


def test_an_output_gives_both_phases_and_the_duration_table():
    got = ci_times.parse_output(OUTPUT)
    assert got["unit"] == {"counts": {"passed": 790, "skipped": 19, "warnings": 14}, "seconds": 86.73}
    assert got["slow"] == {"counts": {"failed": 1, "passed": 66, "skipped": 10}, "seconds": 1847.49}
    assert got["slow_durations"] == [
        {"test": "tests/harness/test_loop.py::test_replay_patches_reach_every_outcome", "when": "setup",
         "seconds": 1054.83},
        {"test": "tests/gates/test_rank_gates.py::test_bench_fails_a_candidate[on some replays]",
         "when": "call", "seconds": 29.34}]


def test_an_output_cut_before_the_slow_phase_is_refused():
    with pytest.raises(ValueError, match="found 1 pytest summaries"):
        ci_times.parse_output(OUTPUT.split("bringing up")[0])


def test_the_runners_log_lines_become_runs():
    log = ("commit bd180d1 rc 1 wall 2008s started 12:41:27 ended 13:14:55\n"
           "something else\n"
           "commit b8e9172 rc 0 wall 1546s started 13:48:00 ended 14:13:46\n")
    assert ci_times.parse_runs(log) == [
        {"commit": "bd180d1", "rc": "1", "wall_s": 2008, "started_utc": "12:41:27", "ended_utc": "13:14:55"},
        {"commit": "b8e9172", "rc": "0", "wall_s": 1546, "started_utc": "13:48:00", "ended_utc": "14:13:46"}]
