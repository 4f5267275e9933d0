"""The decode step over W processes, one per rank (``kern step --gpus W [--emulate N]``).

Parent side: :func:`launch` starts W side drivers (``python -m gates.driver MODE``), each in its
own process group with torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT`` on a free local port), watches them, and when any rank ends
badly or the wall-clock limit passes kills every rank's process group at once: a rank blocked
in a collective on a dead peer would otherwise wait out the backend's own timeout. Ranks also
die with the launcher (``PR_SET_PDEATHSIG`` on Linux), so a killed ``kern`` leaves no orphans.

Rank side: :func:`join` initializes ``torch.distributed`` (gloo on the CPU, NCCL on GPUs, one
GPU per rank: ``cuda:LOCAL_RANK``).

The decisions are pure and tested directly: :func:`layout_name` (which layout W processes
compute), :func:`rank_env`, :func:`combine` (one result from W: a bucket's time is the slowest
rank's; the ranks must agree byte for byte on everything replicated).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .sides import HARNESS_ROOT, Outcome, _last_line, classify, side_env

WORLDS = (1, 2, 4, 8)


class RanksError(ValueError):
    """A rank count the user asked for cannot run (the user must change the flags)."""


# ------------------------------------------------------------------ decisions (pure)
def layout_name(gpus: int, emulate: int | None = None) -> str:
    """The layout ``gpus`` processes compute: ``tp{gpus}`` (the model really split over them),
    or with ``emulate`` N each process's share of the N-rank layout (``tpN``; ``tp8`` is the
    published EP2 x TP4 deployment) while the collectives span the ``gpus`` processes."""
    if gpus not in WORLDS:
        raise RanksError(f"--gpus must be one of {', '.join(map(str, WORLDS))}, got {gpus}")
    n = gpus if emulate is None else emulate
    if n not in WORLDS or n % gpus:
        raise RanksError(f"--emulate must be one of {', '.join(map(str, WORLDS))} and a multiple "
                         f"of --gpus {gpus}, got {emulate}")
    return f"tp{n}"


def rank_env(base: dict, rank: int, world: int, port: int) -> dict:
    """A rank's environment: the side's, plus torchrun's variables."""
    return {**base, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def combine(results: list[dict], layout: str, backend: str) -> dict:
    """One ``run`` result from every rank's: rank 0's document, where each bucket's
    ``median_ms`` is the slowest rank's (a step is done when its last rank is), NaN counts are
    summed, and ``ranks_agree`` says whether every rank ended with the same bytes of
    everything replicated (residual stream, top values, next tokens) and of the gathered
    logits."""
    world = len(results)
    out = dict(results[0])
    n = int(layout[2:]) if layout.startswith("tp") else world
    if world == 1:
        note = (f"one process computes rank 0's share of the {n}-rank layout; the collectives "
                f"are the identity") if n > 1 else "one process computes the whole model"
    elif n > world:
        note = (f"each of {world} processes computes its rank's share of the {n}-rank layout; "
                f"the collectives span the {world} processes")
    else:
        note = f"the model split over {world} processes"
    out["ranks"] = {"world": world, "layout": layout, "backend": backend, "emulated": n > world,
                    "note": note}
    buckets = {}
    for b, e0 in results[0]["buckets"].items():
        entries = [r["buckets"][b] for r in results]
        medians = [e["median_ms"] for e in entries]
        slow = max(range(world), key=lambda r: medians[r])
        agree = all(e.get("replicated_sha") == e0.get("replicated_sha")
                    and e.get("logits_sha") == e0.get("logits_sha") for e in entries)
        buckets[b] = {**e0, "median_ms": medians[slow], "times_ms": entries[slow]["times_ms"],
                      "slowest_rank": slow, "rank_medians_ms": medians,
                      "nan_or_inf_logits": sum(e["nan_or_inf_logits"] for e in entries),
                      "ranks_agree": agree}
    out["buckets"] = buckets
    return out


# ------------------------------------------------------------------ rank side
def join(device: str, timeout_s: float = 600.0) -> tuple[int, str]:
    """Join the process group the launcher's variables describe; returns (rank, device)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
        device, backend = f"cuda:{local}", "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    return rank, device


def leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


# ------------------------------------------------------------------ parent side
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the launcher's own teardown still applies


@dataclass
class Ended:
    """How one process ended."""

    returncode: int | None
    timed_out: bool
    killed: bool  # ended by the launcher because another rank failed or time ran out
    order: int  # when the launcher saw it end (0 first); ties within one poll keep rank order


def run_all(cmds: list[list[str]], envs: list[dict], logs: list[Path], timeout_s: float,
            progress=None, poll_s: float = 0.2) -> list[Ended]:
    """Start every command in its own process group; wait for all. The first to exit non-zero,
    or the time limit, ends all the others (SIGKILL to their groups); an exception here (a
    SIGTERM turned into SystemExit, Ctrl-C) does too."""
    procs, files = [], []
    t0 = time.monotonic()
    ended: dict[int, Ended] = {}
    try:
        for cmd, env, log in zip(cmds, envs, logs):
            f = open(log, "w")
            files.append(f)
            procs.append(subprocess.Popen(cmd, cwd=HARNESS_ROOT, env=env, stdout=f,
                                          stderr=subprocess.STDOUT, start_new_session=True,
                                          preexec_fn=_die_with_parent))
        last_progress = 0.0
        while len(ended) < len(procs):
            for i, p in enumerate(procs):
                if i not in ended and p.poll() is not None:
                    ended[i] = Ended(p.returncode, False, False, len(ended))
            failed = any(e.returncode != 0 for e in ended.values())
            late = time.monotonic() - t0 > timeout_s
            if (failed or late) and len(ended) < len(procs):
                for i, p in enumerate(procs):
                    if i not in ended:
                        _kill(p)
                        ended[i] = Ended(p.returncode, late and not failed, True, len(ended))
                break
            now = time.monotonic()
            if progress and now - last_progress >= 2.0:
                last_progress = now
                progress(_last_line(logs[0]), now - t0)
            time.sleep(poll_s)
    except BaseException:
        for p in procs:
            _kill(p)
        raise
    finally:
        for f in files:
            f.close()
    return [ended[i] for i in range(len(procs))]


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()


def rank_out(out: Path, rank: int) -> Path:
    return out.with_name(f"{out.stem}.rank{rank}.json")


def launch(mode: str, tree: Path, spec: dict, out: Path, timeout_s: float,
           progress=None) -> Outcome:
    """Run ``gates.driver MODE`` as ``spec["world"]`` ranks and combine their results into
    ``out``'s Outcome. A failing rank is named in ``kind`` and its log is the one reported."""
    import json

    world = int(spec["world"])
    out.parent.mkdir(parents=True, exist_ok=True)
    spec_path = out.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec, indent=1))
    port = free_port()
    base = side_env()
    cmds, envs, logs = [], [], []
    for r in range(world):
        cmds.append([sys.executable, "-m", "gates.driver", mode, "--tree", str(tree), "--spec",
                     str(spec_path), "--out", str(rank_out(out, r))])
        envs.append(rank_env(base, r, world, port))
        logs.append(out.with_name(f"{out.stem}.rank{r}.log"))
    t0 = time.monotonic()
    ended = run_all(cmds, envs, logs, timeout_s, progress)
    wall = time.monotonic() - t0
    tails = [log.read_text(errors="replace")[-4000:] for log in logs]
    kinds = [classify(e.returncode, e.timed_out, t) for e, t in zip(ended, tails)]
    # the cause: the first rank to end badly by itself (the others were killed for it, or
    # failed after it in a collective), else a timeout
    by_order = sorted(range(world), key=lambda r: ended[r].order)
    cause = next((r for r in by_order if not ended[r].killed and kinds[r] != "ok"),
                 next((r for r in by_order if ended[r].timed_out), None))
    if cause is not None:
        return Outcome(False, f"{kinds[cause]} (rank {cause} of {world})", ended[cause].returncode,
                       wall, None, tails[cause], logs[cause])
    missing = [r for r in range(world) if not rank_out(out, r).exists()]
    if missing:
        return Outcome(False, f"error (rank {missing[0]} of {world} wrote no result)", 0, wall,
                       None, tails[missing[0]], logs[missing[0]])
    results = [json.loads(rank_out(out, r).read_text()) for r in range(world)]
    device = str(results[0].get("environment", {}).get("device", ""))
    backend = "none" if world == 1 else "nccl" if device.startswith("cuda") else "gloo"
    return Outcome(True, "ok", 0, wall, combine(results, spec["layout"], backend), tails[0],
                   logs[0])

