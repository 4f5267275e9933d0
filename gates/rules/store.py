"""The scorer's model store, its lifecycle decided (pure; the shell that starts, leases and ends
the store process is gates/launch/store.py, the process itself gates/side/driver.py's ``store``).

A store builds the model's weights once and shares them over CUDA IPC with the sides of every
run that leases it: the scorer's runs and the accuracy gate's tap sides of every judgment on
its slot while its key holds (its holder, ``kern loop`` or ``kern try``, keeps it across
judgments; a merge that changes the weights' code replaces it). Each lease gets a decode state built fresh for it (the
caches and recurrent state follow the target seed; a lease's sides never read what an earlier
lease's sides wrote), and the weights are verified by a keyed digest (a key drawn in the store
process, never sent anywhere) before every lease and when it ends: a side that wrote the
shared weights is named, and the store that held them is not leased again.

* :class:`StoreKey`: what the weights are and where the store can serve (the code that builds
  them, the model's settings, the slot's GPUs, the sandbox mechanism it shares with its sides;
  not the trees or run folders of the sides: each joins the store's group in its own root).
* :func:`decide`: for a scorer run's :class:`Need` and the store held (:class:`Held`, or
  None): reuse it, start one, replace it, or none (each side builds its own model), with why.
  A lease asked for while another is open is refused (:class:`StoreRefused`).
* :func:`released`: what a lease's end means (:class:`Release`): keep the store, or retire it
  (its state still on the device, its group's /dev/shm not swept clean), and the failed check
  of the candidate's side when the weights changed under the lease.
* :func:`uncovered`: the store process ran only the code its key covers (:data:`STORE_FILES`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

# The files of a kernel tree (under kernels/) the store process imports to build the weights,
# and nothing else (its run reports what it imported; :func:`uncovered`). The store digest
# covers them: the protected model code (gates/scorer.py's MODEL_FILES) and the package files
# it cannot import without (the package markers, k31/platform.py's INTERPRET flag).
STORE_FILES = ("__init__.py", "k31/__init__.py", "k31/config.py", "k31/formats.py",
               "k31/synthetic.py", "k31/platform.py", "k31/weights.py", "k31/state.py",
               "k31/model.py", "k31/workload/__init__.py")

REUSE, START, REPLACE, NONE = "reuse", "start", "replace", "none"


class StoreRefused(RuntimeError):
    """A store was asked for a lease while one is open: a bug of the scorer that asked."""


@dataclass(frozen=True)
class StoreKey:
    """What a store's weights are and where it can serve them. Two scorer runs with equal keys
    read the same weights and may share one store."""

    digest: str  # the code that builds the weights: store_digest(tree) over STORE_FILES
    model: str
    layout: str
    seed: int
    weight_sets: int
    state_dtype: str | None
    gpus: str | None  # the slot's devices (CUDA_VISIBLE_DEVICES; None: the caller's own)
    # the sandbox mechanism the store shares with its sides (kern.yaml's sandbox): a side of
    # any tree and run folder joins its group in a root of its own (gates/launch/sandbox.py)
    sandbox: str

    def differs(self, other: "StoreKey") -> list[str]:
        """The fields in which ``other`` differs from this key, in field order."""
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]


@dataclass(frozen=True)
class Held:
    """What the harness knows of the store it holds."""

    key: StoreKey
    alive: bool  # its process runs
    intact: bool  # its weights matched their build's digest when last verified
    leased: bool  # a lease is open (a scorer run attached to it has not released it)


@dataclass(frozen=True)
class Need:
    """What one scorer run asks of a store."""

    key: StoreKey
    cuda: bool  # the sides run on a GPU (CUDA IPC exists)
    world: int  # processes per side
    same_model: bool  # every side's tree builds the same weights (their store digests agree)


@dataclass(frozen=True)
class Plan:
    action: str  # REUSE | START | REPLACE | NONE
    reason: str


def decide(held: Held | None, need: Need) -> Plan:
    """Pure: what a scorer run does for its model (module docstring). Raises
    :class:`StoreRefused` when ``held`` is leased: one store serves one run at a time."""
    if not need.cuda:
        return Plan(NONE, "no CUDA IPC on the CPU: each side builds its own model")
    if need.world > 1:
        return Plan(NONE, f"{need.world} ranks per side: each rank builds its own share "
                          f"(a store serves one process)")
    if not need.same_model:
        return Plan(NONE, "the sides' trees build different weights (their store digests "
                          "differ): each side builds its own model")
    if held is None:
        return Plan(START, "no store held")
    if held.leased:
        raise StoreRefused("the model store was asked for a lease while one is open (expected "
                           "one scorer run at a time on a store): a bug of the scorer")
    if not held.alive:
        return Plan(REPLACE, "the store held has ended")
    if not held.intact:
        return Plan(REPLACE, "the store's weights differ from their build's digest")
    diff = held.key.differs(need.key)
    if diff:
        return Plan(REPLACE, f"the store held serves another model or place ({', '.join(diff)} differ)")
    return Plan(REUSE, "the same weights, verified before this lease")


@dataclass(frozen=True)
class Release:
    """What the end of a lease means: whether the store serves the next one, and the failed
    check (``gates.rules.stats``' form) of the candidate's side where the weights changed."""

    keep: bool
    reason: str
    failed_check: dict | None = None


WEIGHTS_CHECK = "shared_weights_unchanged"


def released(intact: bool | None, sides: tuple[str, ...], freed: bool = True,
             shm_clean: bool = True) -> Release:
    """Pure: a lease ended; ``intact``: the store's digest of its weights matched their
    build's (None: not verified, the store ended or did not answer); ``sides``: the sides that
    attached during it ("A" main's, "B" the candidate's); ``freed``: the lease's state left the
    device (CUDA IPC keeps a block its consumers did not release: a store still holding one
    would leave the next run's state no room, so a new store serves it); ``shm_clean``: its
    group's /dev/shm holds nothing but the store's own live files after the sweep
    (gates/rules/shm.py; where it may hold more, a side's file would reach the next lease's
    sides, so the store and its group end). Main's side runs the code main merged, so weights
    changed under a lease the candidate's side shared are its doing."""
    if intact is None:
        return Release(False, "the store's weights could not be verified after the lease")
    if intact and not freed:
        return Release(False, "its weights verified unchanged, but the lease's state is still "
                              "held on the device")
    if intact and not shm_clean:
        return Release(False, "its weights verified unchanged, but its group's /dev/shm could not "
                              "be swept (entries left, or the store did not say which files it maps)")
    if intact:
        return Release(True, "its weights verified unchanged after the lease")
    check = None
    if "B" in sides:
        check = {"check": WEIGHTS_CHECK,
                 "why": "the shared model's weights changed while the candidate's side was "
                        "attached to them (expected every weight as the store built it: a side "
                        "reads the weights, it never writes them)"}
    return Release(False, "its weights changed during the lease", check)


def uncovered(loaded: list[str], covered: tuple[str, ...] = STORE_FILES) -> list[str]:
    """Pure: the files of kernels/ the store process imported (``loaded``, relative to
    kernels/) that its key does not cover: a store that ran code outside its digest is not
    trusted to serve the weights another judgment reads."""
    return sorted(set(loaded) - set(covered))
