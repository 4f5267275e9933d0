"""Judging slots: which GPUs (or CPU slots) a judgment may hold, and one lock per slot.

``kern.yaml``'s ``farm.slots`` is ``auto`` (every visible GPU, in groups of ``farm.gpus`` GPUs
of this host; on a machine without CUDA one CPU slot) or an explicit list: each entry one slot,
either GPU ids as ``CUDA_VISIBLE_DEVICES`` names them (``"0"``, ``"2,3"``) or a CPU slot name
(``"cpu0"``, ``"cpu1"``: more than one judgment at a time on a CPU machine, for tests).

Every judgment holds one slot for all its gate processes (the accuracy gate's sides and the
scorer's A/B rounds: A and B never on different GPUs), and those processes see only the slot's
GPUs (the :class:`~gates.requests.Placement` of :meth:`Pool.placement`, which the gates' requests carry
to every launcher, sets ``CUDA_VISIBLE_DEVICES`` in their environment). A lock
file per slot under ``runs/slots/`` replaces the single ``runs/gpu.lock``: any process judging
on this repository (``kern loop``, ``kern try``) takes a slot that no other holds. With one GPU
there is one slot and nothing changes.

The decisions (:func:`resolve_slots`, :func:`judging_width`) are pure; the
:class:`Pool` is the shell around the lock files.
"""
from __future__ import annotations

import fcntl
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gates.requests import Placement

from .settings import Farm

AUTO = "auto"
_CPU_NAME = re.compile(r"^cpu[0-9]+$")
_GPU_IDS = re.compile(r"^[A-Za-z0-9-]+(,[A-Za-z0-9-]+)*$")  # indices or GPU-<uuid>


class FarmError(ValueError):
    """``farm.*`` in kern.yaml does not fit this machine; the message says what to edit."""


@dataclass(frozen=True)
class Slot:
    """One place a judgment runs: ``devices`` are GPU ids as CUDA_VISIBLE_DEVICES names them
    (empty for a CPU slot, whose processes see no GPU)."""

    host: str
    name: str
    devices: tuple[str, ...] = ()

    @property
    def visible(self) -> str:
        """The slot's value of CUDA_VISIBLE_DEVICES ('' for a CPU slot: no GPU)."""
        return ",".join(self.devices)

    @property
    def label(self) -> str:
        return f"{self.host}/{self.name}"


def visible_gpus(env: dict, device_count: int) -> list[str]:
    """Pure: the GPU ids this process may hand out: CUDA_VISIBLE_DEVICES's entries when it is
    set (a slot's value must name physical ids, not the renumbered 0..n-1), else 0..n-1."""
    v = env.get("CUDA_VISIBLE_DEVICES")
    if v is not None:
        ids = [x.strip() for x in v.split(",") if x.strip()]
        return ids[:device_count] if device_count >= 0 else ids
    return [str(i) for i in range(device_count)]


def slot_models(slots: list[Slot], listed: list[dict] | str) -> str:
    """Pure: what judges on ``slots``, for the phase a score belongs to: ``cpu`` when no slot
    holds a GPU, else the distinct models of the slots' GPUs (sorted, joined by `` + ``).
    ``listed``: the GPUs as nvidia-smi lists them (``index``, ``uuid``, ``name``), or why it
    could not list them (every GPU then reads ``unlisted``: a phase of its own, not a guess)."""
    ids = [d for s in slots for d in s.devices]
    if not ids:
        return "cpu"
    names = set()
    for d in ids:
        rows = [] if isinstance(listed, str) else [
            g for g in listed if d in (g.get("index"), g.get("uuid")) or (d.startswith("GPU-")
                                                                      and str(g.get("uuid", "")).startswith(d))]
        names.add(rows[0]["name"] if len(rows) == 1 else f"unlisted GPU {d}")
    return " + ".join(sorted(names))


def nvidia_smi(fields: list[str]) -> list[dict] | str | None:
    """The GPUs nvidia-smi lists, one dict of ``fields`` (its ``--query-gpu`` names) per GPU
    (physical ids, whatever CUDA_VISIBLE_DEVICES says); a str: why it could not list them; None:
    no nvidia-smi on PATH. No CUDA call: the loop's own process never makes a context on a GPU
    its judgments time."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if r.returncode != 0:
        return (r.stderr or r.stdout).strip()[-300:]
    return [dict(zip(fields, (c.strip() for c in line.split(",", len(fields) - 1))))
            for line in r.stdout.strip().splitlines() if line.strip()]


def gpu_listing() -> list[dict] | str:
    """:func:`slot_models`'s input: each GPU's ``index``, ``uuid`` and ``name``, or why none."""
    got = nvidia_smi(["index", "uuid", "name"])
    return "nvidia-smi not on PATH" if got is None else got


def resolve_slots(spec, *, cuda: bool, visible: list[str], gpus_per_slot: int, host: str) -> list[Slot]:
    """Pure: the slots of ``farm.slots`` (``spec``) on this host. ``auto``: with CUDA every
    visible GPU in groups of ``gpus_per_slot`` (the left-over GPUs unused), without one CPU
    slot. A list: each entry a slot, GPU ids of this host or a CPU slot name; every GPU in
    at most one slot. Raises :class:`FarmError` naming the key, what was expected and what
    was found."""
    w = gpus_per_slot
    if isinstance(w, bool) or not isinstance(w, int) or w < 1:
        raise FarmError(f"farm.gpus: expected a number of GPUs per slot >= 1, found {w!r}")
    if spec == AUTO:
        if not cuda:
            return [Slot(host, "cpu0")]
        if len(visible) < w:
            raise FarmError(f"farm.slots: auto with farm.gpus = {w} needs {w} visible GPU(s), found "
                            f"{len(visible)} ({','.join(visible) or 'none'}); lower farm.gpus or make "
                            f"more GPUs visible (CUDA_VISIBLE_DEVICES)")
        groups = [tuple(visible[i:i + w]) for i in range(0, len(visible) - w + 1, w)]
        return [Slot(host, "gpu" + "-".join(g), g) for g in groups]
    if not isinstance(spec, list) or not spec:
        raise FarmError(f"farm.slots: expected 'auto' or a non-empty list of slots (GPU ids such "
                        f"as \"0\" or \"2,3\", or CPU slot names such as \"cpu0\"), found {spec!r}")
    slots, seen = [], {}
    for entry in spec:
        if not isinstance(entry, (str, int)) or isinstance(entry, bool):
            raise FarmError(f"farm.slots: expected each slot to be GPU ids or a CPU slot name, "
                            f"found {entry!r}")
        text = str(entry).strip()
        if _CPU_NAME.match(text):
            if cuda:
                raise FarmError(f"farm.slots: {text!r} is a CPU slot but this machine has CUDA: its "
                                f"gates run the gpu profile on a GPU; list GPU ids or use auto")
            slots.append(Slot(host, text))
            continue
        if not _GPU_IDS.match(text):
            raise FarmError(f"farm.slots: expected GPU ids (\"0\", \"2,3\") or a CPU slot name "
                            f"(\"cpu0\"), found {entry!r}")
        if not cuda:
            raise FarmError(f"farm.slots: {text!r} names GPUs but this machine has no CUDA; use auto "
                            f"or CPU slot names (\"cpu0\", \"cpu1\")")
        ids = tuple(text.split(","))
        if len(ids) != w:
            raise FarmError(f"farm.slots: slot {text!r} has {len(ids)} GPU(s), expected farm.gpus = {w}")
        for i in ids:
            if i not in visible:
                raise FarmError(f"farm.slots: GPU {i!r} of slot {text!r} is not visible here "
                                f"(visible: {','.join(visible) or 'none'})")
            if i in seen:
                raise FarmError(f"farm.slots: GPU {i!r} is in slot {seen[i]!r} and in {text!r}: a "
                                f"GPU belongs to one slot, else two judgments time each other")
            seen[i] = text
        slots.append(Slot(host, "gpu" + "-".join(ids), ids))
    names = [s.name for s in slots]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise FarmError(f"farm.slots: slot(s) {dup} listed twice")
    return slots


def judging_width(jobs: int, slots: int) -> int:
    """Pure: how many judgments run at once: one per slot, no more than there are to judge
    (at least one: a tick with work judges it). The orchestrator still applies their
    outcomes in number order, whichever finishes first."""
    return max(1, min(jobs, slots))


def slots_for(farm: Farm, cuda: bool, host: str | None = None, env=None,
              device_count: int | None = None) -> list[Slot]:
    """The slots of this machine for kern.yaml's ``farm`` section."""
    env = os.environ if env is None else env
    if device_count is None:
        device_count = _device_count() if cuda else 0
    return resolve_slots(farm.slots if farm.slots == AUTO else list(farm.slots), cuda=cuda,
                         visible=visible_gpus(env, device_count) if cuda else [],
                         gpus_per_slot=farm.gpus, host=host or os.uname().nodename)


def _device_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def lock_path(runs: Path, slot: Slot) -> Path:
    return runs / "slots" / f"{slot.host}-{slot.name}.lock"


class Pool:
    """The slots of one repository's ``runs/``: :meth:`hold` takes a free one (waiting while
    all are held, by this process's other judgments or by another ``kern try``/``kern loop``)
    and sets the environment its gate processes get."""

    def __init__(self, runs: Path, slots: list[Slot], poll_s: float = 0.5, die_with_parent: bool = False):
        if not slots:
            raise FarmError("farm.slots: no slot to judge on")
        self.runs, self.slots, self.poll_s = Path(runs), list(slots), poll_s
        self.die_with_parent = die_with_parent

    def __len__(self) -> int:
        return len(self.slots)

    def free(self) -> int:
        """How many slots no process holds right now (a snapshot: it may change at once)."""
        n = 0
        for s in self.slots:
            f = self._try(s)
            if f is not None:
                n += 1
                _release(f)
        return n

    def _try(self, slot: Slot):
        path = lock_path(self.runs, slot)
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return None
        return f

    def placement(self, slot: Slot, sandbox: str) -> Placement:
        """Where the sides of a judgment on ``slot`` run (its gate processes see only its
        GPUs and take their share of this machine's memory), confined by kern.yaml's
        ``sandbox``: what the gates' requests carry to every launcher."""
        return Placement(sandbox=sandbox, gpus=slot.visible, judgments=len(self.slots),
                         die_with_parent=self.die_with_parent)

    @contextmanager
    def hold(self, wait_s: float | None = None):
        """Hold a free slot for the block (yields the :class:`Slot`; :meth:`placement` says how
        its sides start). ``wait_s``: give up after this long (TimeoutError), None: wait."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            for s in self.slots:
                f = self._try(s)
                if f is not None:
                    break
            else:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"no judging slot of {len(self.slots)} came free in "
                                       f"{wait_s:.0f}s (locks under {self.runs / 'slots'})")
                time.sleep(self.poll_s)
                continue
            break
        try:
            f.seek(0)
            f.truncate()
            f.write(f"pid {os.getpid()}\n")
            f.flush()
            yield s
        finally:
            _release(f)


def _release(f) -> None:
    try:
        fcntl.flock(f, fcntl.LOCK_UN)
    finally:
        f.close()

