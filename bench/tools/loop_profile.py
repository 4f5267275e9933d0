"""The loop's profiles of main, brought back from a GPU run, as bench/results files.

    python bench/tools/loop_profile.py --profiles DIR --ledger LEDGER [--out-dir bench/results]

``DIR`` is the run's ``runs/profile`` (from its ``attempts.tgz``): ``<sha12>-loop-<key>.json``,
each measured on the device in that run (its ``runs/`` starts empty: only the ledger travels).
Each becomes ``<date>-<machine>-profile-<rows>-loop-<sha7>.json``: the profile as measured,
with the date of the ledger's last run, the GPU, the full commit and the versions ahead of it
(the briefs of the next sub-agents read it: ``kern brief TARGET --profile FILE``). A file that
is already there is left as it is; half-written profiles (``*.partial.*``) are skipped.
Nothing here measures anything.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NAME = re.compile(r"^(?P<sha>[0-9a-f]{12})-loop-[0-9a-f]+\.json$")


def machine(gpu: str) -> str:
    """Pure: the results files' machine slug of a device name ("NVIDIA H200" -> "h200")."""
    m = re.search(r"\b([A-Z]\d{2,4})\b", gpu or "")
    if not m:
        raise ValueError(f"environment: cannot tell the machine from the profile's gpu {gpu!r} "
                         "(expected a name such as 'NVIDIA H200')")
    return m.group(1).lower()


def result(measured: dict, commit: str, date: str) -> tuple[str, dict]:
    """Pure: (file name, content) of one loop profile ``measured`` (``runs/profile``'s JSON)
    of main at ``commit``, measured on ``date``."""
    env = measured.get("environment") or {}
    prof = measured.get("profile") or {}
    rows = prof.get("rows")
    if not env.get("gpu") or rows is None:
        raise ValueError("candidate of the results: the profile holds no environment.gpu or "
                         f"profile.rows (expected a loop profile of main; got keys {sorted(measured)})")
    spec = measured.get("spec") or {}
    free = "with" if spec.get("free") else "without"
    head = {"date": date, "gpu": env["gpu"], "commit": commit, "torch": env.get("torch"),
            "triton": env.get("triton"),
            "what": f"the loop's own profile of main {commit[:7]} at {rows} rows (kern loop on the "
                    f"device, {spec.get('replays')} replays, {free} the leave-one-out column): floors at the "
                    "card's read ceiling measured in the same process, torch's sum beside it; brought "
                    "back in the run's attempts.tgz (bench/journey/import.sh)"}
    name = f"{date}-{machine(env['gpu'])}-profile-{rows}-loop-{commit[:7]}.json"
    return name, {**head, **measured}


def last_run_date(ledger: Path) -> str:
    """The date (YYYY-MM-DD) of the ledger's last run: the run that measured the profiles."""
    from harness.ledger import Ledger

    led = Ledger(ledger, readonly=True)
    try:
        runs = led.runs()
    finally:
        led.close()
    if not runs:
        raise ValueError(f"user: {ledger} records no run (expected the ledger the GPU run brought back)")
    return runs[-1].started_at[:10]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", type=Path, required=True, help="the run's runs/profile folder")
    ap.add_argument("--ledger", type=Path, required=True, help="the ledger the run brought back")
    ap.add_argument("--out-dir", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    date = last_run_date(args.ledger)
    for path in sorted(args.profiles.glob("*-loop-*.json")):
        m = NAME.match(path.name)
        if not m:
            continue  # a partial file
        commit = subprocess.run(["git", "rev-parse", "--verify", m["sha"] + "^{commit}"],
                                capture_output=True, text=True)
        if commit.returncode:
            print(f"loop_profile: {path.name}: commit {m['sha']} is not in this repository "
                  "(fetch the run's device-main.bundle first): skipped", file=sys.stderr)
            continue
        name, doc = result(json.loads(path.read_text()), commit.stdout.strip(), date)
        out = args.out_dir / name
        if out.exists():
            print(f"loop_profile: {out} is there already: left as it is")
            continue
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"loop_profile: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
