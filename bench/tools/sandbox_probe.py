"""Run a small CUDA + Triton program inside each sandbox mechanism this machine allows, as a
gate side would start (gates.launch.sandbox's plan, gates/side/confine.py, the gates' side
environment), and print what it said: the GPU check the CPU tests cannot make.

    python bench/tools/sandbox_probe.py                 every mechanism this machine allows, and off
    python bench/tools/sandbox_probe.py namespaces      one mechanism
    python bench/tools/sandbox_probe.py --json out.json also write the results

Exit status: 0 the probe ran in every mechanism tried, 1 it failed in one (its stderr is
printed), 2 nothing could be tried.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gates.launch import sandbox  # noqa: E402
from gates.launch.process import side_env  # noqa: E402
from gates.requests import Placement  # noqa: E402
from gates.rules import confinement  # noqa: E402

PROBE = '''
import os, sys, time
t0 = time.time()
import torch
print("torch", torch.__version__, "cuda available", torch.cuda.is_available(), flush=True)
x = torch.arange(1024, device="cuda", dtype=torch.float32)
print("cuda tensor sum", float(x.sum()), flush=True)
import triton, triton.language as tl

@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)

y = torch.empty_like(x)
_double[(4,)](x, y, 1024, BLOCK=256)
torch.cuda.synchronize()
print("triton kernel ok", bool((y == 2 * x).all()), "in", round(time.time() - t0, 1), "s", flush=True)
'''


def probe(mechanism: str, work: Path) -> dict:
    """The probe as a bench side of ``work``'s tree starts under ``mechanism``: the gates' own
    ``sandbox.wrap`` reads the side's tree and run folder off the command line's tail (the
    probe ignores those arguments)."""
    tree = work / "tree"
    (tree / "kernels").mkdir(parents=True, exist_ok=True)
    run = work / f"run-{mechanism}"
    run.mkdir(parents=True, exist_ok=True)
    script = run / "probe.py"
    script.write_text(PROBE)
    env = side_env(Placement())
    cmd = [sys.executable, str(script), "gates.side.driver", "bench", "--tree", str(tree),
           "--out", str(run / "out.json")]
    try:
        cmd = sandbox.wrap(cmd, Placement(sandbox=mechanism), env=env)
    except confinement.SandboxUnavailable as e:  # the gates would refuse to start the side too
        return {"mechanism": mechanism, "rc": 125, "wall_s": 0.0, "stdout": "", "stderr": str(e)}
    t0 = time.time()
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=str(ROOT))
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, str(e.stdout or ""), f"timed out after 300 s\n{e.stderr or ''}"
    return {"mechanism": mechanism, "rc": rc, "wall_s": round(time.time() - t0, 1),
            "stdout": out[-4000:], "stderr": err[-8000:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mechanism", nargs="*", help="namespaces, landlock, user or off (default: every one allowed)")
    ap.add_argument("--json", help="also write the results to this file")
    a = ap.parse_args(argv)
    f = sandbox.facts()
    allowed = [m for m in ("namespaces", "landlock", "user")
               if (m == "namespaces" and not f.namespaces) or (m == "landlock" and f.landlock_abi >= 1)
               or (m == "user" and not f.user)]
    print(f"facts: namespaces {f.namespaces or 'allowed'}; landlock ABI {f.landlock_abi}; "
          f"user {f.user or 'allowed'}", flush=True)
    wanted = a.mechanism or [*allowed, "off"]
    if not wanted:
        print("sandbox_probe: no mechanism allowed here and none named", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="kern-sandbox-probe-") as work:
        os.chmod(work, 0o755)
        for mech in wanted:
            r = probe(mech, Path(work))
            results.append(r)
            print(f"== {mech}: rc {r['rc']} in {r['wall_s']} s\n{r['stdout']}", flush=True)
            if r["rc"] != 0:
                print(f"-- stderr:\n{r['stderr']}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"facts": str(f), "results": results}, indent=1))
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
