"""How much earlier a batch's next member starts its first tap step when its replay side starts
beside the member before it's scorer (gates/rules/overlap.py), on this machine's CPU.

A loop tick of two members of one batch (tests' fixtures: the small config, one tap row, two
comment-only moe.situ edits) on real accuracy sides, the scorer a stand-in that takes
``--scorer-s`` seconds (the CPU's real scorer is mechanics, not a GPU's rounds). Measured from the
first member's scorer end to the second's replay release (its hidden inputs handed over: its tap
pass starts there), with the overlap on and off (off: the loop prepares nothing), runs
alternating. A CPU figure: it says nothing of the H200.

    PYTHONPATH=. python bench/tools/overlap_cpu.py --runs 3 --out bench/results/<date>-cpu-overlap.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path


def one(on: bool, scorer_s: float) -> dict:
    import pytest

    import gates.accuracy as acc
    from harness.orchestrator import Ahead, Orchestrator
    from tests.gates.candidates import ONE_ROW_TAP, candidate, context, make_repo
    from tests.harness.test_batch_loop import EDIT2
    from tests.harness.test_faults import EDIT, faster, queued

    mp = pytest.MonkeyPatch()
    ends, released = [], []
    real_line = acc.KeptOnDemand.line

    def line(self, proc):
        out = real_line(self, proc)
        released.append(self.released_at)
        return out

    def bench(req, progress=print, stores=None):
        time.sleep(scorer_s)
        ends.append(time.monotonic())
        return faster(req.machine, req.scorer, -0.12)

    try:
        mp.setattr(acc.KeptOnDemand, "line", line)
        mp.setattr("gates.scorer.run_bench", bench)
        if not on:
            mp.setattr(Ahead, "scorer_started", lambda self, placement: None)
        with tempfile.TemporaryDirectory() as tmp:
            repo = make_repo(Path(tmp), ONE_ROW_TAP)
            shas = [candidate(repo, n, [e]) for n, e in (("s1", EDIT), ("s2", EDIT2))]
            ctx, _ = context(repo)
            ns = [queued(ctx, sha, f"cand {i}") for i, sha in enumerate(shas)]
            t0 = time.monotonic()
            Orchestrator(ctx).tick(spawn=False)
            wall = time.monotonic() - t0
            doc = json.loads((ctx.runs / "attempts" / str(ns[1]) / "judgment-1.json").read_text())
    finally:
        mp.undo()
    return {"overlap": on, "scorer_end_to_release_s": released[-1] - ends[0], "tick_s": wall,
            "second_accuracy_s": doc["test"]["wall_s"], "verdict": doc["test"]["verdict"],
            "early": doc["test"].get("early")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scorer-s", type=float, default=6.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows = [one(on, args.scorer_s) for _ in range(args.runs) for on in (False, True)]
    summary = {}
    for on in (False, True):
        xs = [r["scorer_end_to_release_s"] for r in rows if r["overlap"] is on]
        summary["on" if on else "off"] = {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs)}
    summary["earlier_s"] = summary["off"]["median_s"] - summary["on"]["median_s"]
    doc = {"what": __doc__.splitlines()[0], "date": time.strftime("%Y-%m-%d"), "host": platform.node(),
           "cpu_note": "a shared 2-core CPU machine, Triton interpreter: says nothing of the H200",
           "scorer_s": args.scorer_s, "rows": rows, "summary": summary}
    text = json.dumps(doc, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
