"""Main's compile side from empty against one seeded by the previous main's compiled cache
(gates/launch/compiled.py ``seed_for``), on this GPU, in one run.

In a clone of this repository's HEAD (A) it commits B: A plus one comment line inside one
``@triton.jit`` kernel (``--edit``), so B's kernels differ from A's in exactly that kernel's
source. Then, each in a fresh runs folder: ``A then B`` (B's compile side starts on A's cache)
and ``B alone`` (from empty). The JSON holds each compile side's wall, kind, seed, generation,
files, and the Triton cache keys (entry folders) of B seeded against B from empty: the seeded
one must hold every key the empty one made, plus A's entry of the edited kernel.

    python3 bench/tools/compile_chain.py --out /tmp/chain.json
    python3 bench/tools/compile_chain.py --buckets 16,32,64,128 --out $OUT/compile_chain.json

``--buckets`` narrows the scorer's build where the GPU cannot hold the full config at 256 rows
(an H100 holds 128); the JSON says which were used.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

EDIT = "kernels/k31/moe/situ.py"


def edited(text: str) -> str:
    """Pure: ``text`` with a comment line as the first line of its first jitted function's
    body (its source, so its Triton key, changes; nothing else does)."""
    at = text.find("@triton.jit\ndef ")
    if at < 0:
        raise ValueError("expected a '@triton.jit' function in the edited file; found none")
    colon = text.find("):\n", at) + 1
    if colon == 0:
        raise ValueError("expected the first '@triton.jit' function's signature to end with '):'; found none")
    return text[:colon + 2] + "    # compile_chain: one kernel's source changed\n" + text[colon + 2:]


def entry_keys(cache: str | None) -> list[str]:
    """The Triton cache's entry folders (one a compiled kernel variant)."""
    return sorted(p.name for p in Path(cache).iterdir() if p.is_dir()) if cache else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--buckets", default="", help="the scorer's buckets to build (default: kern.yaml's)")
    ap.add_argument("--edit", default=EDIT, help="the file whose first jitted kernel gets a comment line")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per compile side")
    args = ap.parse_args(argv)

    import torch

    from gates.launch import compiled
    from gates.requests import Placement
    from harness.settings import load

    cuda = torch.cuda.is_available()
    work = Path(tempfile.mkdtemp(prefix="compile-chain-"))
    repo = work / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True,
                                    text=True).stdout.strip()
    a = git("rev-parse", "HEAD")
    path = repo / args.edit
    path.write_text(edited(path.read_text()))
    git("-c", "user.name=compile-chain", "-c", "user.email=chain@kern", "commit", "-qam",
        f"compile_chain: a comment in {args.edit}'s first kernel")
    b = git("rev-parse", "HEAD")

    cfg = load(repo / "kern.yaml").resolve(cuda)
    machine = cfg.machine
    if args.buckets:
        buckets = tuple(int(x) for x in args.buckets.split(","))
        machine = dataclasses.replace(machine, buckets=buckets, weights=(1,) * len(buckets))
    place = Placement(sandbox=cfg.sandbox)

    def prep(rev, runs):
        t0, said = time.monotonic(), set()

        def progress(line, *_):  # the side's last log line, polled: each new one once
            if line and line not in said:
                said.add(line)
                print(f"  {rev[:10]}: {line}", file=sys.stderr, flush=True)

        got = compiled.prepare(repo, rev, runs, cfg.target, machine, cuda, args.timeout, place, progress)
        wall = time.monotonic() - t0
        print(f"{rev[:10]} in {runs.name}: {got.kind}, {wall:.1f}s, seed {got.seed}, "
              f"{got.files} files", file=sys.stderr, flush=True)
        if got.kind != compiled.MADE:
            raise SystemExit(f"environment: the compile side of {rev[:10]} ended {got.kind}: {got.detail} "
                             f"(log {got.log}); expected a made cache")
        return {"rev": rev, "wall_s": wall, **got.to_dict(), "keys": entry_keys(got.path)}

    chain = work / "runs-chain"
    empty = work / "runs-empty"
    a_first = prep(a, chain)
    b_seeded = prep(b, chain)
    b_empty = prep(b, empty)
    seeded, alone = set(b_seeded["keys"]), set(b_empty["keys"])
    out = {
        "what": "main's compile side of B (A + one kernel's source changed) from empty against "
                "seeded by A's compiled cache, one run (bench/tools/compile_chain.py)",
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(0) if cuda else "cpu",
        "commit": a, "edited": args.edit,
        "torch": torch.__version__, "triton": compiled._triton_version(),
        "buckets": list(machine.buckets), "test_rows": list(machine.test_rows),
        "context": machine.context, "test_context": machine.test_context,
        "a_from_empty": a_first, "b_seeded_by_a": b_seeded, "b_from_empty": b_empty,
        "seeded_holds_every_key_of_empty": alone <= seeded,
        "keys_only_in_seeded": sorted(seeded - alone), "keys_only_in_empty": sorted(alone - seeded),
        "saved_s": b_empty["wall_s"] - b_seeded["wall_s"],
    }
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps({k: out[k] for k in ("gpu", "seeded_holds_every_key_of_empty", "saved_s")}
                     | {"walls_s": [round(x["wall_s"], 1) for x in (a_first, b_seeded, b_empty)],
                        "only_in_seeded": len(out["keys_only_in_seeded"]),
                        "only_in_empty": out["keys_only_in_empty"]}))
    return 0 if alone <= seeded else 1


if __name__ == "__main__":
    sys.exit(main())
