"""How much earlier the next judgment starts its first tap step when its sides start beside the
judgment before it's scorer (gates/rules/overlap.py), on this machine's CPU.

A loop tick of two candidates (tests' fixtures: the small config, one tap row) on real accuracy
sides, the scorer a stand-in that takes ``--scorer-s`` seconds (the CPU's real scorer is
mechanics, not a GPU's rounds), with the overlap on and off (off: the loop prepares nothing),
runs alternating. ``--case batch``: two comment-only moe.situ edits, two members of one batch;
the second's first tap step is its replay's release (its hidden inputs handed over, the
batch's recording shown). ``--case across``: a moe.situ and a moe.combine edit, two batches of
one; the second's first tap step is its main record side's hand-over (its hidden inputs: its
record pass starts there), its replay released once main recorded. Measured from the first's
scorer end. A CPU figure: it says nothing of the H200.

    PYTHONPATH=. python bench/tools/overlap_cpu.py --case across --runs 3 \
        --out bench/results/<date>-cpu-overlap.json   (merged into the file's ``cases``)
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path


def one(on: bool, scorer_s: float, case: str = "batch") -> dict:
    import pytest

    import gates.accuracy as acc
    from harness.orchestrator import Ahead, Orchestrator
    from tests.gates.candidates import ONE_ROW_TAP, candidate, context, make_repo
    from tests.harness.test_batch_loop import EDIT2
    from tests.harness.test_faults import COMBINE_EDIT, EDIT, faster, queued

    mp = pytest.MonkeyPatch()
    ends, released, handed = [], [], []
    real_line, real_main_line = acc.KeptOnDemand.line, acc.MainKeeper.line

    def line(self, proc):
        out = real_line(self, proc)
        released.append(self.released_at)
        return out

    def main_line(self, proc):  # main's record side gets its hidden inputs: its pass starts
        handed.append(time.monotonic())
        return real_main_line(self, proc)

    def bench(req, progress=print, stores=None):
        time.sleep(scorer_s)
        ends.append(time.monotonic())
        return faster(req.machine, req.scorer, -0.12)

    try:
        mp.setattr(acc.KeptOnDemand, "line", line)
        mp.setattr(acc.MainKeeper, "line", main_line)
        mp.setattr("gates.scorer.run_bench", bench)
        if not on:
            mp.setattr(Ahead, "scorer_started", lambda self, placement: None)
        with tempfile.TemporaryDirectory() as tmp:
            repo = make_repo(Path(tmp), ONE_ROW_TAP)
            second = EDIT2 if case == "batch" else COMBINE_EDIT
            shas = [candidate(repo, n, [e]) for n, e in (("s1", EDIT), ("s2", second))]
            ctx, _ = context(repo)
            ns = [queued(ctx, sha, f"cand {i}") for i, sha in enumerate(shas)]
            t0 = time.monotonic()
            Orchestrator(ctx).tick(spawn=False)
            wall = time.monotonic() - t0
            doc = json.loads((ctx.runs / "attempts" / str(ns[1]) / "judgment-1.json").read_text())
    finally:
        mp.undo()
    first_step = released[-1] if case == "batch" else min(t for t in handed if t > ends[0])
    return {"overlap": on, "scorer_end_to_first_tap_step_s": first_step - ends[0],
            "scorer_end_to_release_s": released[-1] - ends[0], "tick_s": wall,
            "second_accuracy_s": doc["test"]["wall_s"], "verdict": doc["test"]["verdict"],
            "early": doc["test"].get("early")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=("batch", "across"), default="across")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scorer-s", type=float, default=6.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rows = [one(on, args.scorer_s, args.case) for _ in range(args.runs) for on in (False, True)]
    summary = {}
    for on in (False, True):
        xs = [r["scorer_end_to_first_tap_step_s"] for r in rows if r["overlap"] is on]
        summary["on" if on else "off"] = {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs)}
    summary["earlier_s"] = summary["off"]["median_s"] - summary["on"]["median_s"]
    case = {"date": time.strftime("%Y-%m-%d"), "host": platform.node(), "scorer_s": args.scorer_s,
            "first_tap_step": "the replay's release" if args.case == "batch" else
            "main's record side's hand-over", "rows": rows, "summary": summary}
    if args.out:
        out = Path(args.out)
        doc = json.loads(out.read_text()) if out.exists() else {}
        doc.update(what=__doc__.splitlines()[0], cpu_note="a shared 2-core CPU machine, Triton "
                   "interpreter: says nothing of the H200")
        doc.setdefault("cases", {})[args.case] = case
        out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
