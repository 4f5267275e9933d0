"""The model store's shell: its process started, leased, verified and ended, no deciding (what
to do with a store is gates/rules/store.py's :func:`~gates.rules.store.decide`; the process is
gates/side/store.py).

:class:`ModelStores` holds at most one store across runs: the caller that judges many times
holds one per slot (``kern loop`` for as long as it runs, ``kern try`` for its judgment;
harness/pipeline.py's ``Context.stores``), and every scorer run of every judgment on that slot
leases the store held while its key holds (gates/judging.py; a judgment without a holder's
starts its own and ends it). A store never outlives its holder: :meth:`ModelStores.close` ends
it (the loop's end, Ctrl-C, an error), and its process dies with the harness's
(``PR_SET_PDEATHSIG``) when the harness is killed outright, so no orphan keeps the GPU's
memory.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from ..protocol import STORE_QUIT, StoreHandles, StoreLease, StoreRelease
from ..requests import Placement
from ..rules.shm import ShmSweep, reported
from ..rules.store import (NONE, REPLACE, REUSE, STORE_FILES, Held, Need, Plan, StoreKey, decide,
                           released, uncovered)
from . import sandbox
from .process import Interactive, SideError


def store_digest(tree: Path) -> str:
    """Hash of the files of ``tree``'s kernels/ the store imports (:data:`STORE_FILES`): two
    trees with the same digest run the same store code and build the same weights."""
    h = hashlib.sha256()
    for name in STORE_FILES:
        p = Path(tree) / "kernels" / name
        h.update(name.encode())
        h.update(p.read_bytes() if p.exists() else b"missing")
    return h.hexdigest()[:16]


class ModelStore:
    """One store process on ``tree`` (main's: never a candidate's) with ``spec`` (the store's
    options), in ``work`` (its own run folder: no side's) and ``group`` (the sandbox its sides
    join, each in a root of its own, or None). Started here; its first line says the weights
    are built."""

    def __init__(self, key: StoreKey, tree: Path, spec: dict, work: Path, place: Placement,
                 group: "sandbox.Group | None", timeout_s: float):
        self.key, self.work, self.group = key, work, group
        self.leases, self.leased, self.intact = 0, False, True
        self.t0 = time.monotonic()
        # whatever ends the harness's process ends the store's (no orphan holds the GPU)
        self.proc = Interactive("store", tree, spec, work, "store", replace(place, die_with_parent=True),
                                group=group)
        try:
            self.ready = self.proc.read(timeout_s)
            if self.ready.get("store") is not True:
                raise SideError("error", f"store: expected its first line to say the weights are "
                                f"built ({{'store': true, ...}}), got {json.dumps(self.ready)[:200]}",
                                self.proc.log_path)
            outside = uncovered(self.ready.get("loaded") or [])
            if outside:
                raise SideError("error", f"store: it imported {', '.join(outside[:5])} of kernels/, "
                                f"which its digest does not cover (expected only "
                                f"{', '.join(STORE_FILES)}): gates/rules/store.py's STORE_FILES "
                                f"must name every file the store runs", self.proc.log_path)
        except BaseException:
            self.close()
            raise
        self.start_s = time.monotonic() - self.t0

    @property
    def log_path(self) -> Path:
        return self.proc.log_path

    def held(self) -> Held:
        # alive: its process and its sandbox's holder (the sides of a later run join that)
        alive = self.proc.proc.poll() is None and (self.group is None or self.group.alive)
        return Held(self.key, alive, self.intact, self.leased)

    def _ask(self, line: str, timeout_s: float) -> dict:
        try:
            self.proc.proc.stdin.write(line)
            self.proc.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the read says how the process ended
        reply = self.proc.read(timeout_s)
        if "error" in reply:
            raise SideError("error", f"store: {reply['error']}", self.proc.log_path)
        return reply

    def lease(self, lease: StoreLease, timeout_s: float) -> dict:
        """A lease: ``{"weights_intact", "state_s"}``; the weights changed since their build:
        ``weights_intact`` false and no lease open."""
        r = self._ask(lease.line(), timeout_s)
        self.leases += 1
        self.intact = bool(r.get("weights_intact"))
        self.leased = self.intact
        return r

    def handles(self, timeout_s: float, into: Path | None = None, weights: bool = False) -> dict:
        """The open lease's model for one more side process: ``{"ready": its IPC file | None
        (a CPU), "sha256": of the file's bytes}``. ``into``: the side's file, in its own run
        folder (the store writes in its own, which no side's root shows): the bytes are copied
        there; the side checks them against ``sha256`` before it loads them. ``weights``: the
        weights alone (a tap side, which builds its own state)."""
        r = self._ask(StoreHandles(weights).line(), timeout_s)
        if into is not None and r.get("ready"):
            into.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(r["ready"], into)
            r = {**r, "ready": str(into)}
        return r

    def release(self, timeout_s: float) -> dict | None:
        """End the open lease: the store's answer (``weights_intact``: the weights are still as
        built; ``freed``: the lease's state left the device), None where it did not answer or
        had ended."""
        if not self.leased:
            return None
        self.leased = False
        try:
            r = self._ask(StoreRelease().line(), timeout_s)
        except SideError:
            self.intact = False
            return None
        self.intact = bool(r.get("weights_intact"))
        return r

    def sweep(self, reply: dict) -> ShmSweep | None:
        """After a release (``reply``, the store's answer; every side of the lease has ended):
        every entry of the group's /dev/shm removed but the files the store said it maps now
        (gates/rules/shm.py), said in the store's log. None where the group has no /dev/shm of
        its own (the sandbox is not namespaces: docs/sandbox.md)."""
        if self.group is None or self.group.shm is None:
            return None
        keep = reported(reply.get("shm"))
        done = ShmSweep((), (), False) if keep is None else self.group.sweep_shm(keep)
        if done is not None:
            self.proc.note(done.line(self.leases))
        return done

    def close(self) -> None:
        """End the process (asked to, then killed) and the sandbox it shares with its sides."""
        p = self.proc.proc
        if p.poll() is None:
            try:
                p.stdin.write(STORE_QUIT + "\n")
                p.stdin.flush()
                p.wait(timeout=30)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self.proc.kill()
        self.proc.close()
        if self.group is not None:
            self.group.close()


class ModelStores:
    """The store a holder keeps across scorer runs (module docstring): :meth:`plan` decides
    for a run's :class:`~gates.rules.store.Need`, :meth:`open` carries the plan out."""

    def __init__(self):
        self.store: ModelStore | None = None
        self.started = 0  # store processes started, for the results and the tests
        self.last_release: dict | None = None  # the store's answer to the last release
        # its group's /dev/shm swept after the last release (None: none swept, no private one)
        self.last_sweep: ShmSweep | None = None

    def plan(self, need: Need) -> Plan:
        return decide(self.store.held() if self.store else None, need)

    def open(self, plan: Plan, start) -> ModelStore | None:
        """The store a run leases under ``plan``: the one held (reuse), a new one from
        ``start()`` (start; replace, once the held one is ended), or None (none)."""
        if plan.action == NONE:
            return None
        if plan.action == REUSE:
            return self.store
        if plan.action == REPLACE:
            self.close()
        self.store = start()
        self.started += 1
        return self.store

    def released(self, sides: tuple, timeout_s: float):
        """End the held store's open lease (``sides``: every side of it has ended) and sweep
        its group's /dev/shm (:meth:`ModelStore.sweep`): :func:`~gates.rules.store.released`'s
        :class:`~gates.rules.store.Release` (a store not to keep is ended here)."""
        if self.store is None:
            return None
        r = self.store.release(timeout_s)
        self.last_release = r
        self.last_sweep = None if r is None else self.store.sweep(r)
        rel = released(None if r is None else bool(r.get("weights_intact")), sides,
                       True if r is None else bool(r.get("freed", True)),
                       self.last_sweep is None or self.last_sweep.clean)
        if not rel.keep:
            self.close()
        return rel

    def close(self) -> None:
        if self.store is not None:
            store, self.store = self.store, None
            store.close()

    def __enter__(self) -> "ModelStores":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
