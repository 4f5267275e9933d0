"""Device tool (issue 6): all-reduce latency at decode sizes, the one-shot kernel vs NCCL vs the
gather path, with the bit-identity checks that make the one-shot path admissible.

    python3 bench/tools/allreduce_latency.py --out $OUT/allreduce.json [--world 2]
        [--rows 16,32,64,128,256] [--hidden 7168] [--calls 20] [--replays 50]

Starts ``--world`` processes itself (torch.multiprocessing, one GPU each, NCCL), or runs as one
rank when torchrun's ``RANK``/``WORLD_SIZE`` are set. NVLink multicast stays off
(``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1``,
set here before torch starts), as the device README requires.

Per row count (``rows x hidden`` bf16, every rank its own seeded values):

* checks: ``oneshot`` equals ``gather`` byte for byte on every rank; every path gives every rank
  the same bytes (``ranks_agree``); a CUDA graph of copy + all-reduce replays to the eager bytes
  (``graph_matches_eager``); NCCL's sum against the rank-order f32 sum (elements differing,
  largest difference), which is why NCCL is only the comparison;
* times: ``graph_us``, the median over ``--replays`` replays of one graph holding ``--calls``
  back-to-back calls, divided by ``--calls``; ``eager_us``, the same loop launched from Python.
  Each rank times its own stream; the summary per path is the slowest rank's median. Timed on
  zero-filled tensors, so back-to-back sums do not grow to inf (no path's speed depends on the
  values).

Writes one JSON document to ``--out`` (environment: GPU, driver, torch, triton, CUDA, NCCL,
commit) and exits 1 if a check failed or a path could not run on CUDA. Without CUDA (gloo, a
mechanics check only): the one-shot path is reported as unavailable and nothing is timed on
graphs.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

for _var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ[_var] = "0" if _var == "NCCL_NVLS_ENABLE" else "1"
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

PATHS = ("nccl", "gather", "oneshot")


# ------------------------------------------------------------------ decisions (pure)
def per_call_us(samples_ms: list[float], calls: int) -> float:
    """Median microseconds per call from timings (ms) of ``calls`` back-to-back calls each."""
    return statistics.median(samples_ms) * 1000.0 / calls


def summarize(per_rank: list[dict]) -> dict:
    """One result per row count from every rank's: times are the slowest rank's medians (an
    all-reduce is done when its last rank is), checks hold only if they hold on every rank."""
    out = {}
    for rows in per_rank[0]:
        merged = {"bytes": per_rank[0][rows]["bytes"], "paths": {}}
        for path in per_rank[0][rows]["paths"]:
            ranks = [r[rows]["paths"][path] for r in per_rank]
            entry = {"per_rank": ranks}
            errors = [x["error"] for x in ranks if "error" in x]
            if errors:
                entry["error"] = errors[0]
            for key in ("graph_us", "eager_us"):
                vals = [x[key] for x in ranks if x.get(key) is not None]
                entry[key] = max(vals) if len(vals) == len(ranks) else None
            for key in ("ranks_agree", "graph_matches_eager", "equals_gather"):
                vals = [x[key] for x in ranks if key in x]
                if vals:
                    entry[key] = all(v is not False for v in vals)
            merged["paths"][path] = entry
        out[rows] = merged
    return out


def failures(summary: dict, on_cuda: bool) -> list[str]:
    """What makes the run a failure: a check that did not hold, or (on CUDA) a path that could
    not run. Without CUDA the one-shot path is expected to be unavailable."""
    bad = []
    for rows, res in summary.items():
        for path, e in res["paths"].items():
            if "error" in e and (on_cuda or path != "oneshot"):
                bad.append(f"{rows} rows, {path}: {e['error']}")
            for key in ("ranks_agree", "graph_matches_eager", "equals_gather"):
                if e.get(key) is False:
                    bad.append(f"{rows} rows, {path}: {key} is false")
    return bad


# ------------------------------------------------------------------ one rank
def partial_values(rows: int, hidden: int, rank: int, seed: int) -> torch.Tensor:
    """This rank's partial sums: random signs, magnitudes 2^-20..2^20, and on a third of the
    elements rank 1 holding exactly minus rank 0's value (a cancellation). Summed in another
    order, or in bf16, those elements lose the other ranks' small terms, so a path that sums
    differently shows in the checks."""
    g = torch.Generator().manual_seed(seed * 1000 + rank * 7 + rows)
    mant = torch.randn(rows, hidden, generator=g)
    exp = torch.randint(-20, 21, (rows, hidden), generator=g).float()
    x = (mant * torch.exp2(exp)).to(torch.bfloat16)
    if rank in (0, 1):  # rank 0's values and the cancelling third, from a generator both share
        shared = torch.Generator().manual_seed(seed * 1000 + rows)
        base = (torch.randn(rows, hidden, generator=shared) *
                torch.exp2(torch.randint(-20, 21, (rows, hidden), generator=shared).float())).to(torch.bfloat16)
        cancel = torch.rand(rows, hidden, generator=shared) < 1 / 3
        x = base if rank == 0 else torch.where(cancel, -base, x)
    return x


def time_ms(device, fn, repeats: int) -> list[float]:
    """Wall time of each of ``repeats`` runs of ``fn``: CUDA events on the current stream, or
    the host clock on the CPU."""
    out = []
    if device.type == "cuda":
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(repeats)]
        for a, b in evs:
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in evs]
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def measure_path(comm, x: torch.Tensor, ref: torch.Tensor | None, args, device) -> tuple[dict, torch.Tensor]:
    """One path at one size: eager result, checks against ``ref`` (the gather path's bytes) and
    across ranks, graph replay vs eager, and times."""
    from gates.side.numerics import bitwise_equal

    res = {}
    got = x.clone()
    comm.all_reduce(got)
    world = dist.get_world_size()
    every = torch.empty(world * got.numel(), dtype=got.dtype, device=device)
    # torch 2.13 renamed all_gather_into_tensor; the device's 2.11 has only the old name
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(every, got.view(-1).contiguous())
    every = every.view(world, -1)
    res["ranks_agree"] = all(bitwise_equal(every[0], every[r]) for r in range(world))
    if ref is not None:
        if comm.all_reduce_mode == "nccl":  # the comparison: how far its bf16 ring sums are
            diff = (got.float() - ref.float()).abs()
            res["vs_gather"] = {"elements_differing": int((got != ref).sum()),
                                "max_abs_diff": float(diff.max()), "of_elements": got.numel()}
        else:
            res["equals_gather"] = bitwise_equal(got, ref)
    zeros = torch.zeros_like(x)
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    res["eager_us"] = per_call_us(time_ms(device, lambda: [comm.all_reduce(zeros) for _ in range(args.calls)],
                                          args.replays), args.calls)
    res["graph_us"] = None
    if device.type == "cuda":
        # graph 1: copy + all-reduce, replayed, must give the eager bytes
        src, buf = x.clone(), torch.empty_like(x)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            buf.copy_(src)
            comm.all_reduce(buf)
        buf.zero_()
        g.replay()
        torch.cuda.synchronize()
        res["graph_matches_eager"] = bitwise_equal(buf, got)
        # graph 2: `calls` back-to-back calls, timed per replay
        timed = torch.cuda.CUDAGraph()
        with torch.cuda.graph(timed):
            for _ in range(args.calls):
                comm.all_reduce(zeros)
        for _ in range(3):
            timed.replay()
        torch.cuda.synchronize()
        dist.barrier()
        res["graph_us"] = per_call_us(time_ms(device, timed.replay, args.replays), args.calls)
    res["paths_taken"] = dict(comm.paths)
    return res, got


def run_rank(rank: int, world: int, args) -> dict:
    """This rank's results: {rows: {bytes, paths: {path: result}}}."""
    from kernels.k31.collectives import CollectivesError, Distributed
    from kernels.k31.comm.oneshot import pack_offsets
    from kernels.k31.config import Layout

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    layout = Layout.named(f"tp{world}", rank=rank, world=world)
    max_bytes = pack_offsets([max(args.rows) * args.hidden * 2])[1]
    comms, errors = {}, {}
    for path in PATHS:  # the same order on every rank: the oneshot construction is collective
        try:
            comms[path] = Distributed(layout, all_reduce=path, max_bytes=max_bytes)
        except CollectivesError as e:
            errors[path] = str(e)
    out = {}
    for rows in args.rows:
        x = partial_values(rows, args.hidden, rank, args.seed).to(device)
        entry = {"bytes": x.numel() * x.element_size(), "paths": {}}
        ref = None
        for path in ("gather", "nccl", "oneshot"):  # gather first: the others are checked against it
            if path in errors:
                entry["paths"][path] = {"error": errors[path]}
                continue
            res, got = measure_path(comms[path], x, ref, args, device)
            if path == "gather":
                ref = got
            entry["paths"][path] = res
        out[rows] = entry
    return out


def environment(world: int) -> dict:
    import triton

    env = {"world": world, "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "multicast_off": {v: os.environ.get(v) for v in (
               "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")}}
    try:
        env["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                       text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        env["commit"] = "unknown (no git)"
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30).stdout.split("\n")[0].strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = "unknown (no nvidia-smi)"
    return env


def rank_main(rank: int, world: int, args, port: int | None = None) -> None:
    """One rank: join the group, measure, and (rank 0) write the document."""
    if port is not None:  # started by this tool, not torchrun
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from gates.side.rank import join, leave

    join("cuda" if torch.cuda.is_available() else "cpu")
    try:
        mine = run_rank(rank, world, args)
        every = [None] * world
        dist.all_gather_object(every, mine)
    finally:
        leave()
    if rank == 0:
        summary = summarize(every)
        bad = failures(summary, torch.cuda.is_available())
        doc = {"tool": "bench/tools/allreduce_latency.py", "environment": environment(world),
               "settings": {"rows": args.rows, "hidden": args.hidden, "dtype": "bfloat16",
                            "calls_per_graph": args.calls, "replays": args.replays, "seed": args.seed},
               "results": {str(k): v for k, v in summary.items()}, "failures": bad}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1))
        def us(v):
            return "-" if v is None else f"{v:.1f}"

        for rows, res in summary.items():
            print(f"{rows:>4} rows: " + "  ".join(
                f"{p} graph {us(e.get('graph_us'))} us eager {us(e.get('eager_us'))} us"
                for p, e in res["paths"].items()), flush=True)
        print("failures: " + ("; ".join(bad) if bad else "none"), flush=True)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--rows", type=lambda s: [int(v) for v in s.split(",")], default=[16, 32, 64, 128, 256])
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--calls", type=int, default=20, help="back-to-back calls in one timed graph")
    ap.add_argument("--replays", type=int, default=50, help="timed replays (or eager loops)")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        rank = int(os.environ["RANK"])
        rank_main(rank, int(os.environ["WORLD_SIZE"]), args)
        if rank != 0:
            return
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        import torch.multiprocessing as mp

        mp.spawn(rank_main, args=(args.world, args, port), nprocs=args.world, join=True)
    if json.loads(Path(args.out).read_text())["failures"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
