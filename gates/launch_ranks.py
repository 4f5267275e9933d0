"""The decode step over W processes, one per rank (``kern step --gpus W [--emulate N]``).

Coordinator (this module): :func:`launch` starts W side drivers (``python -m gates.side.driver
MODE``), each in its own process group with torchrun's variables (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` on a free local port), watches them, and when
any rank ends badly or the wall-clock limit passes kills every rank's process group at once: a
rank blocked in a collective on a dead peer would otherwise wait out the backend's own timeout.
Ranks also die with the launcher (``PR_SET_PDEATHSIG`` on Linux), so a killed ``kern`` leaves no
orphans.

Rank side (``gates/side/rank.py``, in each rank's process): ``join`` initializes
``torch.distributed`` (gloo on the CPU, NCCL on GPUs, one GPU per rank: ``cuda:LOCAL_RANK``).

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

from . import disk, sandbox
from .launch import (HARNESS_ROOT, _die_with_parent, Interactive, SideError, SideOutcome, _last_line,
                     classify, reply_kind, run_side, side_env, start_hand_over)
from .protocol import BenchCommand, Quit, parse as check_options, rank_document
from .stats import worst_ops

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


def side_ranks(gpus: int | None, emulate: int | None, cuda: bool,
               devices: int, model: str | None = None) -> tuple[int, str | None]:
    """(processes, layout) of a side from ``--gpus`` / ``--emulate``: one process on the
    profile's layout (None) when neither is given. ``devices``: GPUs this machine has;
    ``model``: the profile's model, whose dimensions the layout must divide."""
    if gpus is None and emulate is None:
        return 1, None
    world = gpus or 1
    layout = layout_name(world, emulate)
    if cuda and devices < world:
        raise RanksError(f"--gpus {world} needs {world} GPUs, this machine has {devices}")
    if model is not None:
        splits(model, layout)
    return world, layout


def splits(model: str, layout: str) -> None:
    """Refuse, before any process starts, a layout the model's dimensions do not divide into
    (the small CPU model has 4 KDA heads: it splits 1, 2 or 4 ways, not 8)."""
    from kernels.k31.config import ConfigError, Dims, Layout, Shapes

    try:
        Shapes(Dims.named(model), Layout.named(layout))
    except ConfigError as e:
        raise RanksError(f"the {model} model does not split into layout {layout} ({e}); ask for "
                         f"fewer ranks, or run the profile with model: full") from None


def base_ranks(base_gpus: int | None, gpus: int | None, emulate: int | None,
               model: str | None = None) -> tuple[int | None, str | None]:
    """(processes, layout) of the base side from ``kern test --base-gpus M``: M processes with
    the model split over them (``tpM``), or (None, None) when A runs like B."""
    if base_gpus is None:
        return None, None
    if gpus is None:
        raise RanksError("--base-gpus M needs --gpus W: the candidate's processes, the model "
                         "split over them (without --gpus it computes one rank's share only)")
    if emulate is not None:
        raise RanksError("--base-gpus compares the whole model split two ways; with --emulate N "
                         "each process computes only its share of the N-rank layout, which no "
                         "other process count reproduces: drop --emulate")
    layout = layout_name(base_gpus)
    if model is not None:
        splits(model, layout)
    return base_gpus, layout


def rank_env(base: dict, rank: int, world: int, port: int) -> dict:
    """A rank's environment: the side's, plus torchrun's variables."""
    return {**base, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def describe(world: int, layout: str, backend: str) -> dict:
    """What ``world`` processes computing ``layout`` are, for reports and JSON."""
    n = int(layout[2:]) if layout.startswith("tp") else world
    if world == 1:
        note = (f"one process computes rank 0's share of the {n}-rank layout; the collectives "
                f"are the identity") if n > 1 else "one process computes the whole model"
    elif n > world:
        note = (f"each of {world} processes computes its rank's share of the {n}-rank layout; "
                f"the collectives span the {world} processes")
    else:
        note = f"the model split over {world} processes"
    return {"world": world, "layout": layout, "backend": backend, "emulated": n > world,
            "note": note}


def slowest_per_replay(times_by_rank: list[list[float]]) -> list[float]:
    """One time per replay from every rank's: the slowest rank's. The ranks of one replay meet
    in its collectives, so the step is done when its last rank is; taking the maximum per
    replay (then the median over replays) is the TPOT a deployment sees, where the slowest
    rank's own median could pair one rank's fast replays with another's slow ones."""
    n = {len(t) for t in times_by_rank}
    if len(n) != 1:
        raise ValueError(f"ranks: every rank must time the same replays, got counts {sorted(n)}")
    return [max(col) for col in zip(*times_by_rank)]


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def combine(results: list[dict], layout: str, backend: str) -> dict:
    """One ``run`` result from every rank's: rank 0's document, where each bucket's times are
    the slowest rank's per replay (:func:`slowest_per_replay`) and ``median_ms`` their median,
    NaN counts are summed, and ``ranks_agree`` says whether every rank ended with the same bytes
    of everything replicated (residual stream, top values, next tokens) and of the gathered
    logits."""
    world = len(results)
    out = dict(results[0])
    out["ranks"] = describe(world, layout, backend)
    buckets = {}
    for b, e0 in results[0]["buckets"].items():
        entries = [r["buckets"][b] for r in results]
        medians = [e["median_ms"] for e in entries]
        times = slowest_per_replay([e["times_ms"] for e in entries])
        buckets[b] = {**e0, "median_ms": _median(times), "times_ms": times,
                      "slowest_rank": max(range(world), key=lambda r: medians[r]),
                      "rank_medians_ms": medians,
                      "nan_or_inf_logits": sum(e["nan_or_inf_logits"] for e in entries),
                      "ranks_agree": agree(entries, ("replicated_sha", "logits_sha"))}
    out["buckets"] = buckets
    return out


def agree(per_rank: list[dict], keys) -> bool:
    """Whether every rank's ``keys`` hold rank 0's values."""
    return all(r.get(k) == per_rank[0].get(k) for r in per_rank for k in keys)


def disagreements(digests_by_rank: list[dict]) -> list[str]:
    """The keys (rank 0's order) at which some rank's digest is missing or differs from rank
    0's: ``[{"rows:step": sha}, ...]`` one per rank."""
    first = digests_by_rank[0]
    keys = list(first) + [k for d in digests_by_rank[1:] for k in d if k not in first]
    return [k for k in dict.fromkeys(keys)
            if any(d.get(k) != first.get(k) for d in digests_by_rank)]


def merge_digests(results: list[dict], layout: str, backend: str) -> dict:
    """One tap result from every rank's: rank 0's (the accuracy gate judges rank 0's op calls
    and the gathered logits), with ``ranks`` and ``rank_disagreements``: the steps after which
    some rank held other replicated bytes or other gathered logits than rank 0."""
    digests = [r.get("rank_digests") or {} for r in results]
    if not digests[0] and results[0].get("role") in ("record", "replay"):
        # an empty comparison would read as agreement: no digest is a failure to measure
        raise ValueError("ranks: rank 0's tap recorded no per-step digests to compare")
    out = dict(results[0])
    out["ranks"] = describe(len(results), layout, backend)
    out["rank_disagreements"] = disagreements(digests)
    return out


def merge_checks(per_rank: list[dict]) -> dict:
    """The output checks of one timed visit over every rank: counts summed (a failure on any
    rank is a failure), tamper signs listed with their rank."""
    out = dict(per_rank[0])
    for k, v in per_rank[0].items():
        if k == "tampered":
            out[k] = [f"rank {r}: {x}" for r, c in enumerate(per_rank) for x in c.get(k, [])]
        elif k != "replays" and isinstance(v, (int, float)):
            out[k] = sum(c.get(k, 0) for c in per_rank)
    return out


def merge_replies(cmd: str, replies: list[dict]) -> dict:
    """One scorer-side reply from every rank's reply to ``cmd``: timed replays take the
    slowest rank per replay (``rank_times`` keeps each rank's), checks add up, ``verify`` holds
    only if it holds on every rank, ``ranks_agree`` compares the replicated bytes each rank
    ended with; anything else is rank 0's (roofline cost, bandwidth: rank 0's share)."""
    out = dict(replies[0])
    if cmd == "time":
        out["times"] = slowest_per_replay([r["times"] for r in replies])
        out["rank_times"] = [r["times"] for r in replies]
        out["checks"] = merge_checks([r["checks"] for r in replies])
        out["replicated_sha"] = [r.get("replicated_sha") for r in replies]
        out["ranks_agree"] = agree(replies, ("replicated_sha",))
    elif cmd == "verify":
        out["equal"] = all(r["equal"] for r in replies)
        out["max_abs_diff"] = max(r["max_abs_diff"] for r in replies)
        out["nan"] = sum(r["nan"] for r in replies)
        if all("ops" in r for r in replies):
            out["ops"] = worst_ops([r["ops"] for r in replies])
    elif cmd == "prepare":
        for k in ("build_s", "capture_s"):
            out[k] = max(r[k] for r in replies)
    return out


# ------------------------------------------------------------------ the coordinator's launcher
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Ended:
    """How one process ended."""

    returncode: int | None
    timed_out: bool
    killed: bool  # ended by the launcher because another rank failed or time ran out
    order: int  # when the launcher saw it end (0 first); ties within one poll keep rank order


def run_all(cmds: list[list[str]], envs: list[dict], logs: list[Path], timeout_s: float,
            progress=None, poll_s: float = 0.2, hidden: dict | None = None, stop=None) -> list[Ended]:
    """Start every command in its own process group; wait for all. The first to exit non-zero,
    or the time limit (or ``stop``, a ``threading.Event``, once set), ends all the others
    (SIGKILL to their groups); an exception here (a SIGTERM turned into SystemExit, Ctrl-C)
    does too. Each gets ``hidden`` once it has imported its tree (``sides.hand_over``)."""
    procs, files, handing = [], [], []
    t0 = time.monotonic()
    ended: dict[int, Ended] = {}
    try:
        for cmd, env, log in zip(cmds, envs, logs):
            f = open(log, "w")
            files.append(f)
            procs.append(subprocess.Popen(cmd, cwd=HARNESS_ROOT, env=env, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=f, text=True,
                                          start_new_session=True, preexec_fn=_die_with_parent))
            handing.append(start_hand_over(procs[-1], hidden, f))
        last_progress = 0.0
        while len(ended) < len(procs):
            for i, p in enumerate(procs):
                if i not in ended and p.poll() is not None:
                    ended[i] = Ended(p.returncode, False, False, len(ended))
            failed = any(e.returncode != 0 for e in ended.values())
            late = time.monotonic() - t0 > timeout_s or (stop is not None and stop.is_set())
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
        for th in handing:  # the ranks' last stray stdout lines reach their logs
            th.join(timeout=10)
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
    return rank_document(out, rank)


def run(mode: str, tree: Path, spec: dict, out: Path, timeout_s: float, progress=None,
        hidden: dict | None = None, stop=None) -> SideOutcome:
    """One side of ``mode`` as one process (world 1) or as its ranks (:func:`launch`);
    ``hidden`` reaches every process over its stdin (``sides.hand_over``); ``stop`` (an
    event) ends it as timed out once set."""
    if int(spec.get("world", 1)) == 1:
        return run_side(mode, tree, spec, out, timeout_s, progress, hidden, stop)
    return launch(mode, tree, spec, out, timeout_s, progress, hidden, stop)


def launch(mode: str, tree: Path, spec: dict, out: Path, timeout_s: float,
           progress=None, hidden: dict | None = None, stop=None) -> SideOutcome:
    """Run ``gates.side.driver MODE`` as ``spec["world"]`` ranks and merge their results into
    ``out`` (``run``: :func:`combine`; ``tap``: :func:`merge_digests`) and the SideOutcome. A
    failing rank is named in ``kind`` and its log is the one reported."""
    import json

    world = int(spec["world"])
    check_options(mode, spec)
    out.parent.mkdir(parents=True, exist_ok=True)
    spec_path = out.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec, indent=1))
    port = free_port()
    base = side_env()
    cmds, envs, logs = [], [], []
    for r in range(world):
        cmds.append([sys.executable, "-m", "gates.side.driver", mode, "--tree", str(tree), "--spec",
                     str(spec_path), "--out", str(rank_out(out, r))])
        envs.append(rank_env(base, r, world, port))
        logs.append(out.with_name(f"{out.stem}.rank{r}.log"))
    t0 = time.monotonic()
    with sandbox.group(mode, tree, out, spec):  # the ranks meet in one sandbox
        ended = run_all([sandbox.wrap(c) for c in cmds], envs, logs, timeout_s, progress, hidden=hidden,
                        stop=stop)
    wall = time.monotonic() - t0
    tails = [log.read_text(errors="replace")[-4000:] for log in logs]
    kinds = [classify(e.returncode, e.timed_out, t) for e, t in zip(ended, tails)]
    for r in range(world):  # a rank that ran out of disk says so, where it wrote
        kinds[r], tails[r] = disk.classified(kinds[r], tails[r], rank_out(out, r).parent)
    # the cause: the first rank to end badly by itself (the others were killed for it, or
    # failed after it in a collective), else a timeout
    by_order = sorted(range(world), key=lambda r: ended[r].order)
    cause = next((r for r in by_order if not ended[r].killed and kinds[r] != "ok"),
                 next((r for r in by_order if ended[r].timed_out), None))
    if cause is not None:
        return SideOutcome(False, f"{kinds[cause]} (rank {cause} of {world})", ended[cause].returncode,
                           wall, None, tails[cause], logs[cause])
    missing = [r for r in range(world) if not rank_out(out, r).exists()]
    if missing:
        return SideOutcome(False, f"error (rank {missing[0]} of {world} wrote no result)", 0, wall,
                           None, tails[missing[0]], logs[missing[0]])
    results = [json.loads(rank_out(out, r).read_text()) for r in range(world)]
    device = str(results[0].get("environment", {}).get("device", ""))
    backend = "none" if world == 1 else "nccl" if device.startswith("cuda") else "gloo"
    merged = results[0] if mode == "compile" else \
        (combine if mode == "run" else merge_digests)(results, spec["layout"], backend)
    out.write_text(json.dumps(merged, indent=1, default=str))
    return SideOutcome(True, "ok", 0, wall, merged, tails[0], logs[0])


class RanksDisagree(SideError):
    """The ranks of one side ended a timed visit with different replicated bytes."""


class RankGroup:
    """The ``world`` rank processes of one scorer side, driven as one side: each request goes
    to every rank (the step's collectives need them all) and their replies become one
    (:func:`merge_replies`). A rank that ends, errs or falls silent ends the group, so no rank
    is left blocked in a collective on a dead peer."""

    def __init__(self, mode: str, tree: Path, spec: dict, workdir: Path, name: str, world: int):
        port, base = free_port(), side_env()
        self.name, self.world = name, world
        self.box = sandbox.side_group(mode, tree, workdir / f"{name}.json", spec).open()
        self.members = [Interactive(mode, tree, spec, workdir, f"{name}.rank{r}",
                                    env=rank_env(base, r, world, port)) for r in range(world)]
        self.box.leave()  # its ranks are in; the group's sandbox lives until close or kill
        self.log_path = self.members[0].log_path

    def wait_imported(self, timeout_s: float) -> None:
        """Every rank imported its tree (``Interactive.wait_imported``)."""
        for r, m in enumerate(self.members):
            try:
                m.wait_imported(timeout_s)
            except SideError as e:
                self.kill()
                raise SideError(e.kind, f"{e} (rank {r} of {self.world})", e.log_path) from None

    def request(self, command: BenchCommand, timeout_s: float) -> dict:
        obj = command.to_dict()
        for m in self.members:
            m.send(obj)
        replies: list = [None] * self.world
        deadline = time.monotonic() + timeout_s
        while any(x is None for x in replies):
            for r, m in enumerate(self.members):
                if replies[r] is not None:
                    continue
                try:
                    replies[r] = m.poll(0.05)
                except SideError as e:  # this rank ended: the others would wait on it forever
                    self.kill()
                    raise SideError(e.kind, f"{e} (rank {r} of {self.world})", e.log_path) from None
            if any(x is not None and not x.get("ok", True) for x in replies):
                break  # a rank that answered with an error: its peers may wait on it forever
            late = [r for r, x in enumerate(replies) if x is None]
            if late and time.monotonic() > deadline:
                self.kill()
                raise SideError("timeout", f"{self.name}: rank(s) {late} of {self.world} gave no "
                                f"answer within {timeout_s:.0f}s", self.members[late[0]].log_path)
        for r, rep in enumerate(replies):
            if rep is not None and not rep.get("ok", True):
                self.kill()
                raise SideError(reply_kind(str(rep.get("error"))),
                                f"{self.name} rank {r} of {self.world}: {rep.get('error')}",
                                self.members[r].log_path)
        merged = merge_replies(command.CMD, replies)
        if merged.get("ranks_agree") is False:
            shas = merged["replicated_sha"]
            odd = next(r for r, x in enumerate(shas) if x != shas[0])
            raise RanksDisagree(
                "ranks disagree",
                f"{self.name}: after {obj.get('bucket')} rows the {self.world} ranks hold different "
                f"replicated bytes (residual stream, top values, next tokens or gathered logits: "
                f"rank 0 {shas[0]}, rank {odd} {shas[odd]}); expected every rank identical",
                self.log_path)
        return merged

    def close(self) -> None:
        for m in self.members:
            m.send(Quit().to_dict())
        for m in self.members:
            m.close()
        self.box.close()

    def kill(self) -> None:
        for m in self.members:
            m.kill()
        self.box.close()

