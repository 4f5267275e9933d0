"""Device one-off: the tree's step vs the step with each reference op under torch.compile, at one
bucket, printing a JSON line per stage (so a time limit keeps what finished)."""
import json
import sys
import time
import warnings

import torch

from gates.protocol import BenchOptions
from gates.side.replays import CapturedSteps
from gates.side.timing import Timer
from gates.spec import side_spec
from harness.settings import load

# inductor's advice (online softmax, TF32) buries the baseline's progress lines on stderr
warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\._inductor")
rows = int(sys.argv[1]) if len(sys.argv) > 1 else 16
cfg = load("kern.yaml").resolve(True)
b = CapturedSteps(BenchOptions.parse(side_spec(cfg.target, cfg.machine, rows=[rows], steps=64)), "cuda")
t0 = time.monotonic()
print(json.dumps({"stage": "prepare", **{k: v for k, v in b.prepare().items() if k != "workload"},
                  "s": time.monotonic() - t0}, default=str), flush=True)
tree = b.time(rows, 10)
print(json.dumps({"stage": "tree", "rows": rows, "times": tree["times"], "checks": tree["checks"]}), flush=True)
r = b.baseline("compile", rows, 3)
# the peak says whether a smaller card holds this row count (the full config at 256 rows does not)
print(json.dumps({"stage": "compile", "rows": rows, **r, "torch": torch.__version__,
                  "peak_gib": torch.cuda.max_memory_allocated() / 2**30}), flush=True)
