"""Write the journey loop's kern.yaml: the repository's, with the replay backend over
bench/journey/patches/. LOOP_CONCURRENCY: agents a tick (3 unless set); LOOP_WALL_HOURS: the loop
starts no judgment that could outlast it (the device's budget, not a kill mid-judgment);
LOOP_FIRST_JUDGMENT_S: what a judgment is counted before the loop has made one. Used by
bench/gpu_evidence.sh loop-start on the device and bench/preflight.sh here.
Usage: python bench/journey/loop_config.py OUT.yaml (from the repository's root)."""
import os
import sys
from pathlib import Path

import yaml

c = yaml.safe_load(Path("kern.yaml").read_text())
c["agent"].update(backend="replay", replay_dir="bench/journey/patches")
# tick 1 spawns LOOP_CONCURRENCY replays, tick 2 judges them in number order
c["loop"]["concurrency"] = int(os.environ.get("LOOP_CONCURRENCY", "3"))
if os.environ.get("LOOP_WALL_HOURS"):
    c["budgets"]["wall_hours"] = float(os.environ["LOOP_WALL_HOURS"])
# LOOP_FIRST_JUDGMENT_S: what the deadline counts for the loop's first judgment (main's compile in it)
if os.environ.get("LOOP_FIRST_JUDGMENT_S"):
    c["loop"]["first_judgment_s"] = float(os.environ["LOOP_FIRST_JUDGMENT_S"])
Path(sys.argv[1]).write_text(yaml.safe_dump(c, sort_keys=False))
