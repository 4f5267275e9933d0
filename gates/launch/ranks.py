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

The decisions are pure (gates/rules/ranks.py): which layout W processes compute, each rank's
environment, one result from W.
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
from ..protocol import BenchCommand, Quit, parse as check_options, rank_document
from ..requests import Placement
from ..rules.ranks import combine, merge_digests, merge_replies, rank_env
from .held import Hold, began
from .process import (HARNESS_ROOT, Interactive, SideError, SideOutcome, _die_with_parent, _last_line, classify,
                      reply_kind, run_side, side_env, start_hand_over)


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
            start = began(t0, hidden)  # None: held (gates/launch/held.py), waiting for its go
            late = (start is not None and time.monotonic() - start > timeout_s) or \
                (stop is not None and stop.is_set())
            if (failed or late) and len(ended) < len(procs):
                for i, p in enumerate(procs):
                    if i not in ended:
                        _kill(p)
                        ended[i] = Ended(p.returncode, late and not failed, True, len(ended))
                break
            now = time.monotonic()
            if progress and start is not None and now - last_progress >= 2.0:
                last_progress = now
                progress(_last_line(logs[0]), now - start)
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


def run(mode: str, tree: Path, spec: dict, out: Path, timeout_s: float, place: Placement, progress=None,
        hidden: dict | None = None, stop=None, group=None) -> SideOutcome:
    """One side of ``mode`` at ``place``, as one process (world 1) or as its ranks (:func:`launch`);
    ``hidden`` reaches every process over its stdin (``sides.hand_over``); ``stop`` (an
    event) ends it as timed out once set; ``group``: the model store's sandbox a one-process
    side joins (a store serves one process: ranks never lease it)."""
    if int(spec.get("world", 1)) == 1:
        return run_side(mode, tree, spec, out, timeout_s, place, progress, hidden, stop, group)
    if group is not None:
        raise ValueError("a side of several ranks was given the model store's sandbox (expected "
                         "none: gates/rules/store.py's decide gives ranks no store): a bug of the gate")
    return launch(mode, tree, spec, out, timeout_s, place, progress, hidden, stop)


def launch(mode: str, tree: Path, spec: dict, out: Path, timeout_s: float, place: Placement,
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
    base = side_env(place)
    cmds, envs, logs = [], [], []
    for r in range(world):
        cmds.append([sys.executable, "-m", "gates.side.driver", mode, "--tree", str(tree), "--spec",
                     str(spec_path), "--out", str(rank_out(out, r))] +
                    (["--hold"] if isinstance(hidden, Hold) else []))
        envs.append(rank_env(base, r, world, port))
        logs.append(out.with_name(f"{out.stem}.rank{r}.log"))
    t0 = time.monotonic()
    with sandbox.group(mode, tree, out, spec) as box:  # the ranks meet in one sandbox
        ended = run_all([sandbox.wrap(c, place, box) for c in cmds], envs, logs, timeout_s, progress,
                        hidden=hidden, stop=stop)
    start = began(t0, hidden)
    held_s = 0.0 if start is None else start - t0
    wall = time.monotonic() - (start if start is not None else t0)
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
                           wall, None, tails[cause], logs[cause], held_s)
    missing = [r for r in range(world) if not rank_out(out, r).exists()]
    if missing:
        return SideOutcome(False, f"error (rank {missing[0]} of {world} wrote no result)", 0, wall,
                           None, tails[missing[0]], logs[missing[0]], held_s)
    results = [json.loads(rank_out(out, r).read_text()) for r in range(world)]
    device = str(results[0].get("environment", {}).get("device", ""))
    backend = "none" if world == 1 else "nccl" if device.startswith("cuda") else "gloo"
    merged = results[0] if mode == "compile" else \
        (combine if mode == "run" else merge_digests)(results, spec["layout"], backend)
    out.write_text(json.dumps(merged, indent=1, default=str))
    return SideOutcome(True, "ok", 0, wall, merged, tails[0], logs[0], held_s)


class RanksDisagree(SideError):
    """The ranks of one side ended a timed visit with different replicated bytes."""


class RankGroup:
    """The ``world`` rank processes of one scorer side, driven as one side: each request goes
    to every rank (the step's collectives need them all) and their replies become one
    (:func:`merge_replies`). A rank that ends, errs or falls silent ends the group, so no rank
    is left blocked in a collective on a dead peer."""

    def __init__(self, mode: str, tree: Path, spec: dict, workdir: Path, name: str, world: int,
                 place: Placement):
        port, base = free_port(), side_env(place)
        self.name, self.world = name, world
        # its ranks share one sandbox, which lives until close or kill
        self.box = sandbox.side_group(mode, tree, workdir / f"{name}.json", spec)
        self.members = [Interactive(mode, tree, spec, workdir, f"{name}.rank{r}", place,
                                    env=rank_env(base, r, world, port), group=self.box) for r in range(world)]
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

