"""A fixed ledger for the journey tests: every outcome once, two phases, main's scores.

Written through the Ledger API with a fixed clock, so the golden report covers the whole path
ledger → records → journey."""
from __future__ import annotations

from pathlib import Path

from gates.summary import AccuracySummary, GateSummary, GuardSummary, ScorerSummary
from harness.ledger import Ledger

PHASE_1 = {"buckets": [16, 32, 64, 128, 256], "weights": [1, 2, 4, 4, 2], "context": 131072,
           "workload": "seed0"}
PHASE_2 = {**PHASE_1, "context": 262144}


class FixedClock:
    """2026-01-10T08:00:00+00:00, then one minute later on every call."""

    def __init__(self):
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        h, m = divmod(self.n, 60)
        return f"2026-01-10T{8 + h:02d}:{m:02d}:00+00:00"


def build(path: Path) -> Ledger:
    led = Ledger(path, clock=FixedClock())
    run = led.start_run("cfg0123456789abc", "h200-a", "sample")
    tick = led.add_tick(run, ["moe.experts", "mla.decode"])
    p1 = led.phase(PHASE_1)
    led.record_score(p1, "base000000001", 41.2, {"16": 30.1, "256": 60.4})

    def attempt(title, target="moe.experts", phase=p1, **kw):
        n = led.new_attempt(title=title, hypothesis=f"why {title}", target=target,
                            backend="tuner", base_sha="base000000001", phase_id=phase, tick_id=tick)
        return n

    def judged(n, state, sha=None, **kw):
        led.transition(n, "running")
        led.update(n, commit_sha=sha or f"c{n:012d}", tokens=1000 * n, cost_usd=0.01 * n)
        led.transition(n, "judging")
        led.transition(n, state, **kw)

    n = attempt("MoE experts: split-K over 2 CTAs")
    judged(n, "merged", delta_ms=-0.35, ci_low=-0.41, ci_high=-0.29, decision="merge")
    led.record_score(p1, f"c{n:012d}", 40.85, None)
    judged(attempt("MLA decode: BLOCK_N 128", "mla.decode"), "abandoned", reason="slower",
           delta_ms=0.21, ci_low=0.15, ci_high=0.27)
    judged(attempt("lm_head: fp8 logits", "lm_head"), "abandoned", reason="accuracy",
           gate=GateSummary(accuracy=AccuracySummary("FAIL", ("KL(A||B) max 0.031 > limit 0.01",))))
    judged(attempt("residual: fuse norm | add", "residual"), "abandoned", reason="within noise",
           delta_ms=-0.02, ci_low=-0.06, ci_high=0.02,
           gate=GateSummary(scorer=ScorerSummary(classification="within noise", band_ms=0.05)))
    judged(attempt("MoE experts: 4 warps", "moe.experts"), "abandoned", reason="guard",
           delta_ms=-0.12, gate=GateSummary(guard=GuardSummary(worst_pct=2.4, rows=16)))
    judged(attempt("touched the reference", "mla.decode"), "abandoned", reason="scope")
    n = attempt("MLA indexer: top-k in one pass", "mla.indexer")
    judged(n, "merged", delta_ms=-0.49, ci_low=-0.55, ci_high=-0.44)
    led.record_score(p1, f"c{n:012d}", 40.36, None)
    n = attempt("KDA: chunked state update", "kda")
    led.transition(n, "running")
    led.transition(n, "crashed", reason="illegal memory access at 256 rows")
    n = attempt("dense: stream-K", "dense")
    led.transition(n, "running")
    led.transition(n, "timed out", reason="scorer timeout")
    judged(attempt("MoE router: fused top-k", "moe.router"), "abandoned", reason="conflict")
    n = attempt("lm_head: split vocab across 2 waves", "lm_head")
    led.transition(n, "running")
    led.transition(n, "not done", estimate_ms=-0.4)

    p2 = led.phase(PHASE_2)
    led.record_score(p2, "c000000000007", 52.0, None)
    n = attempt("MLA decode: 2-stage split-KV", "mla.decode", phase=p2)
    judged(n, "merged", delta_ms=-0.8, ci_low=-0.9, ci_high=-0.7)
    led.record_score(p2, f"c{n:012d}", 51.2, None)
    n = attempt("MoE experts: persistent grid", "moe.experts", phase=p2)
    led.transition(n, "running")
    w = attempt("MoE experts: persistent grid + 8 stages", "moe.experts", phase=p2)
    led.transition(w, "waiting", waiting_on=n)
    judged(attempt("lm_head: skip the last row when timed", "lm_head", phase=p2), "abandoned",
           reason="scorer check",
           gate=GateSummary(scorer=ScorerSummary(
               checks=({"check": "timed_outputs_identical",
                        "why": "rows 16 replay 3: next tokens differ from main's"},),
               graph_matches_eager=True)))
    return led
