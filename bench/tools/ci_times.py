"""How long `.ci/run` took on fresh clones, as one JSON record for bench/results/.

    python bench/tools/ci_times.py --log RUNS.log --clones DIR --out RECORD.json [--note TEXT]

``RUNS.log`` holds one line per run, as the fresh-clone runner writes them::

    commit <sha> rc <exit status> wall <seconds>s started <HH:MM:SS> ended <HH:MM:SS>

and ``DIR/pair-<sha>.out`` is that run's whole output, ``DIR/pair-<sha>/`` its clone (its
``.venv`` says which torch and triton ran). The runner that wrote them (2026-12-03)::

    for sha in SHA...; do
      d=DIR/pair-$sha; rm -rf $d; git clone -q REPO $d; cd $d; git checkout -q $sha
      t0=$(date +%s); .ci/run > DIR/pair-$sha.out 2>&1; rc=$?; t1=$(date +%s)
      echo "commit $sha rc $rc wall $((t1-t0))s started $(date -u -d @$t0 +%H:%M:%S)" \
           "ended $(date -u -d @$t1 +%H:%M:%S)" >> RUNS.log
    done The record keeps, per run, the wall time, the unit
phase's and the slow phase's pytest summaries (counts and seconds) and the slow phase's
``--durations`` table, so that two commits' runs can be compared test by test. A run's
install time is what is left of its wall time once both phases are taken away.

Times are of the machine the runs were on (named in the record), never GPU scores.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
from pathlib import Path

RUN_LINE = re.compile(r"^commit (?P<sha>\w+) rc (?P<rc>\S+) wall (?P<wall>\d+)s started (?P<start>\S+) "
                      r"ended (?P<end>\S+)")
# pytest -q's last line: "790 passed, 19 skipped, 14 warnings in 86.73s (0:01:26)"
SUMMARY = re.compile(r"^=*\s*(?P<counts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[\d.]+)s")
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<when>setup|call|teardown)\s+(?P<test>.+)$")


def parse_runs(log: str) -> list[dict]:
    """Pure: the runs named in the runner's log, in its order."""
    runs = []
    for line in log.splitlines():
        m = RUN_LINE.match(line.strip())
        if m:
            runs.append({"commit": m["sha"], "rc": m["rc"], "wall_s": int(m["wall"]),
                         "started_utc": m["start"], "ended_utc": m["end"]})
    return runs


def parse_output(text: str) -> dict:
    """Pure: the pytest phases of one `.ci/run` output: the summaries in order (the unit
    phase, then the slow phase) and the slow phase's duration table."""
    phases, durations = [], []
    for line in text.splitlines():
        m = SUMMARY.match(line.strip())
        if m:
            counts = {k: int(n) for n, k in (c.split(" ") for c in m["counts"].split(", "))}
            phases.append({"counts": counts, "seconds": float(m["seconds"])})
            continue
        d = DURATION.match(line.strip())
        if d:
            durations.append({"test": d["test"], "when": d["when"], "seconds": float(d["seconds"])})
    if len(phases) != 2:
        raise ValueError(f"expected a unit phase and a slow phase in the output, found {len(phases)} "
                         "pytest summaries: was the run cut short?")
    unit, slow = phases
    return {"unit": unit, "slow": slow, "slow_durations": durations}


def versions(venv: Path) -> dict:
    """torch and triton of a clone's venv (what the run used)."""
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import torch, triton, sys; print(torch.__version__, triton.__version__, "
                          "sys.version.split()[0])"], capture_output=True, text=True, check=True)
    torch, triton, python = out.stdout.split()
    return {"torch": torch, "triton": triton, "python": python}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", required=True, type=Path)
    ap.add_argument("--clones", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    runs = []
    for run in parse_runs(args.log.read_text()):
        sha = run["commit"]
        run.update(parse_output((args.clones / f"pair-{sha}.out").read_text(errors="replace")))
        run["install_s"] = round(run["wall_s"] - run["unit"]["seconds"] - run["slow"]["seconds"], 1)
        run.update(versions(args.clones / f"pair-{sha}" / ".venv"))
        runs.append(run)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    record = {"date": datetime.date.today().isoformat(), "machine": {"cpu": cpu, "cores": os.cpu_count(),
              "host": platform.node()}, "gpu": None, "what": "fresh clone, .ci/run, one run after another",
              "note": args.note, "runs": runs}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}: {len(runs)} runs")


if __name__ == "__main__":
    main()
