"""The merge decision under simulated timing noise: pure, seeded, no GPU.

Each trial is one A/B at kern.yaml's GPU defaults (the gpu profile's rounds and replays, else
the bench section's; the bench section's bootstrap, noise floor and guard), analysed by the
scorer's own statistics (``gates.scorer.analyse``) and decided by the pipeline's own rule
(``harness.pipeline.decide_outcome``). Replays visit in the scorer's A B B A order.

Two noise models, both with the step times of the H200 evidence:
- ``timing``: per-replay lognormal jitter (sigma drawn per trial from 0.3-1 %), 2 % of replays
  slow by 3-15 %, and the machine drifting between visits (a random walk, 0.1 % per visit).
- ``timing+inputs``: the same, plus the spread between replays measured on the H200
  (bench/results/2026-11-29-h200-bench-ab-extra-work.json): every replay runs a fresh token
  set, routing changes the work, so replays differ by 4.6, 3.6, 2.1, 1.5, 0.65 % (CV at 16..256
  rows). The n-th replay of A and of B run the same inputs (their times correlate at 0.99
  there), so the simulation shares that factor between the two sides.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gates.rules.scope import ScopeResult
from gates.scorer import analyse, pattern
from harness.pipeline import decide_outcome
from harness.settings import load

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = load(ROOT / "kern.yaml")
GPU = SETTINGS.resolve(True)
BENCH = GPU.bench
ROUNDS, REPLAYS = GPU.machine.rounds, GPU.machine.replays  # as run_bench picks them
BUCKETS, WEIGHTS = list(GPU.machine.buckets), list(GPU.machine.weights)
# median step per bucket on the H200 (ms) and the replay-to-replay spread of its inputs
STEP_MS = {16: 80.9, 32: 121.5, 64: 171.9, 128: 228.7, 256: 293.5}
INPUT_CV = {16: 0.046, 32: 0.036, 64: 0.021, 128: 0.015, 256: 0.0065}
PASS = {"verdict": "PASS bit-identical", "reasons": [], "evidence": {"outcome_a": "ok", "outcome_b": "ok"}}


@dataclass(frozen=True)
class Noise:
    jitter: tuple = (0.003, 0.01)  # per-replay lognormal sigma, drawn per trial in this range
    slow_p: float = 0.02  # chance that a replay is an outlier
    slow: tuple = (0.03, 0.15)  # how much slower an outlier is
    drift: float = 0.001  # per visit, a random walk of the whole machine
    input_cv: dict = field(default_factory=dict)  # per bucket; shared by A's and B's n-th replay


TIMING = Noise()
TIMING_INPUTS = Noise(input_cv=INPUT_CV)


def simulate(rng: random.Random, noise: Noise, speedup: float, rounds: int = ROUNDS,
             replays: int = REPLAYS) -> tuple[dict, dict]:
    """One A/B's replay times: (samples, blocks) as run_bench collects them. B is ``speedup``
    faster than A (0.01 = 1 %; negative: slower)."""
    assert set(BUCKETS) <= set(STEP_MS), f"kern.yaml's gpu buckets {BUCKETS}: add their H200 times"
    sigma = rng.uniform(*noise.jitter)
    inputs = {b: [math.exp(rng.gauss(0, noise.input_cv.get(b, 0.0))) for _ in range(2 * rounds * replays)]
              for b in BUCKETS}
    cursor = {"A": 0, "B": 0}  # each side's next unused input set
    samples = {k: {b: [] for b in BUCKETS} for k in "AB"}
    blocks = {"A": [], "B": []}
    level = 0.0
    for side in pattern(rounds):
        level += rng.gauss(0, noise.drift)
        visit = {}
        for b in BUCKETS:
            mu = STEP_MS[b] * (1 - speedup if side == "B" else 1.0) * math.exp(level)
            xs = []
            for i in range(replays):
                x = mu * inputs[b][cursor[side] + i] * math.exp(rng.gauss(0, sigma))
                xs.append(x * (1 + rng.uniform(*noise.slow)) if rng.random() < noise.slow_p else x)
            samples[side][b] += xs
            visit[b] = xs
        cursor[side] += replays
        blocks[side].append(visit)
    return samples, blocks


def decide(samples: dict, blocks: dict):
    """The pipeline's decision on one simulated A/B (every replay's checks passed)."""
    checks = {k: [{"bucket": b, "unwritten_or_invalid": 0, "nonfinite": 0, "repeated_outputs": 0}
                  for b in BUCKETS] for k in "AB"}
    verify = {"verify": {k: {b: {"equal": True} for b in BUCKETS} for k in "AB"}}
    an = analyse(samples, blocks, checks, verify, BENCH, BUCKETS, WEIGHTS)
    return decide_outcome(ScopeResult(True), PASS, {"outcome": "ok", "analysis": an, "buckets": BUCKETS})


def merged(seed: int, noise: Noise, speedup: float, trials: int) -> int:
    rng = random.Random(seed)
    return sum(decide(*simulate(rng, noise, speedup)).state == "merged" for _ in range(trials))


@pytest.mark.parametrize("noise", [TIMING, TIMING_INPUTS], ids=["timing", "timing+inputs"])
def test_a_hundred_no_op_commits_never_merge(noise):
    assert merged(1234, noise, 0.0, 100) == 0


def test_a_true_one_percent_gain_merges_in_90_percent_of_trials():
    hits = merged(99, TIMING, 0.01, 100)
    assert hits >= 90, f"{hits} of 100 at {ROUNDS} rounds x {REPLAYS} replays"


def test_a_true_one_percent_gain_merges_in_90_percent_of_trials_with_the_h200_input_spread():
    # unpaired statistics found 2 of 100 here; pairing replays by input set finds 100 of 100
    hits = merged(99, TIMING_INPUTS, 0.01, 100)
    assert hits >= 90, f"{hits} of 100 at {ROUNDS} rounds x {REPLAYS} replays"


def test_half_a_percent_is_below_what_the_gate_claims_to_see():
    """The noise floor (kern.yaml bench.noise_pct 0.5 % of the score) is a promise too: a gain
    at the floor must not merge as a matter of course."""
    assert merged(5, TIMING_INPUTS, 0.005, 100) <= 10


@pytest.mark.parametrize("noise", [TIMING, TIMING_INPUTS], ids=["timing", "timing+inputs"])
def test_two_percent_extra_work_is_abandoned_as_slower(noise):
    out = decide(*simulate(random.Random(7), noise, -0.02))
    assert (out.state, out.reason) == ("abandoned", "slower"), out


def test_a_machine_profile_sets_its_own_noise_floor():
    cpu = SETTINGS.resolve(False)
    assert cpu.bench.noise_pct == cpu.machine.noise_pct >= 7.0
    # a profile without one keeps the section's
    assert GPU.machine.noise_pct is None and GPU.bench.noise_pct == SETTINGS.data["bench"]["noise_pct"]


@pytest.mark.parametrize("bad", [-1, "ten", True])
def test_a_profile_noise_floor_must_be_a_percentage(bad):
    import copy

    from harness.settings import validate

    data = copy.deepcopy(SETTINGS.data)
    data["profiles"]["cpu"]["noise_pct"] = bad
    assert validate(data) == [f"profiles.cpu.noise_pct: expected a number >= 0 or null, found {bad!r}"]
