"""The scorer's baseline lines: the reference step's median against the tree's, with the first
call (where torch.compile compiles) reported apart, and a stopped baseline saying why."""
from harness.terminal import baseline_lines


def _res(baselines):
    return {"buckets": [16, 64], "analysis": {"sides": {"A": {"buckets": {16: {"median": 2.0}, 64: {"median": 4.0}}}}},
            "baselines": baselines}


def test_compile_time_is_reported_apart_from_the_step_time():
    lines = baseline_lines(_res({"compile": {16: {"times": [7.0, 5.0, 6.0], "first_call_s": 412.34},
                                             64: {"times": [9.0], "first_call_s": 388.0}}}))
    assert lines == [
        "baseline   compile   16 rows      6.000 ms  = 3.00x the tree's step  (first call 412.3 s, compiling)",
        "baseline   compile   64 rows      9.000 ms  = 2.25x the tree's step  (first call 388.0 s, compiling)"]


def test_eager_first_call_is_a_warm_up_and_a_failure_says_why():
    lines = baseline_lines(_res({"eager": {16: {"times": [40.0], "first_call_s": 1.25},
                                           64: {"error": "eager baseline failed: RuntimeError: x"}}}))
    assert lines == ["baseline   eager   16 rows     40.000 ms  = 20.00x the tree's step  (first call 1.2 s)",
                     "baseline   eager 64 rows: eager baseline failed: RuntimeError: x"]


def test_no_baseline_no_line():
    assert baseline_lines(_res({})) == [] and baseline_lines({"analysis": {"sides": {}}}) == []


def test_compile_warm_up_steps_are_reported_beside_the_first_call():
    lines = baseline_lines(_res({"compile": {16: {"times": [6.0], "first_call_s": 90.0,
                                                  "warmup_steps": 3, "warmup_s": 41.04}}}))
    assert lines == ["baseline   compile   16 rows      6.000 ms  = 3.00x the tree's step  "
                     "(first call 90.0 s, compiling, then 3 warm-up step(s) in 41.0 s)"]
