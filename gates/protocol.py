"""The subprocess boundary's shared names: what the loop process and a side process both
read and write, defined once for both.

Imported by the loop side (``gates/accuracy.py``, ``gates/sides.py``, ``gates/ranks.py``)
and by the side (``gates/side/driver.py``, ``tap.py``, ``bench_side.py``); it imports nothing
of either (only the standard library), so the side reaches no loop-side module through it.

:class:`SideOptions` and one subclass per mode of ``gates.side.driver`` (:data:`OPTIONS`):
what a side is sent in its spec file, checked by :func:`parse` on both ends.

:class:`TapFiles`: the files of one tap side's folder (``runs/tap/<commit>-<key>/``). Main's
recording is written by its ``record`` and ``noise`` roles and read by the candidate's
``replay`` and by the verdict; a side of several ranks writes rank 0's tensors in the folder
itself and rank r's in ``rank<r>/`` under it, each rank's document beside the merged one as
the launcher names it (:func:`rank_document`: ``record.rank<r>.json``).
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import ClassVar


def rank_document(out: Path, rank: int) -> Path:
    """Where rank ``rank`` of a side launched as several ranks writes its document ``out``
    (``gates/ranks.launch`` merges them into ``out``)."""
    return out.with_name(f"{out.stem}.rank{rank}.json")


@dataclass(frozen=True)
class TapFiles:
    root: Path  # the tap side's folder

    RECORD = "record.json"  # A's document: the free pass's digests, hashes, the workload
    KEPT_A = "kept_a.pt"  # A's kept op calls (inputs and outputs) of the touched ops
    LOGITS_A = "logits_a.pt"  # A's logits, every row of every step
    NOISE = "noise.json"  # A's repeat and band passes' document
    LOGITS_A2 = "logits_a2.pt"  # A again from the restored state (is A reproducible?)
    LOGITS_AREF = "logits_aref.pt"  # A with the touched ops on the reference (the band)
    LOGITS_B = "logits_b.pt"  # the candidate's logits
    RESULT = "result.json"  # the candidate's document
    # what main's recording is: the candidate's replay reads it and must leave it as it was
    # (its logs beside it may still grow; they are not read)
    RECORDING = (RECORD, KEPT_A, LOGITS_A, NOISE, LOGITS_A2, LOGITS_AREF)

    def rank(self, rank: int) -> "TapFiles":
        """Where rank ``rank`` writes its tensors: rank 0 in the folder, as a one-process side
        does, the others in ``rank<r>`` under it."""
        return TapFiles(self.root / f"rank{rank}") if rank else self

    def document(self, name: str, rank: int = 0, world: int = 1) -> Path:
        """Rank ``rank``'s own document ``name`` (RECORD, NOISE, RESULT): the file itself on a
        one-process side, else the rank's file as the launcher names it (the file itself then
        holds the merged document)."""
        p = self.root / name
        return p if world == 1 else rank_document(p, rank)

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    @property
    def record(self) -> Path:
        return self.root / self.RECORD

    @property
    def recorded(self) -> bool:
        """Main's recording is complete (its document and its kept calls are written)."""
        return self.record.exists() and (self.root / self.KEPT_A).exists()

    def recording(self, rank: int = 0, world: int = 1) -> list[Path]:
        """The files of main's recording that rank ``rank`` of ``world`` wrote."""
        if rank == 0:
            return [self.root / n for n in self.RECORDING]
        return [self.document(self.RECORD, rank, world), *(self.rank(rank) / n for n in self.RECORDING)]


# ------------------------------------------------------------------ a side's options
class OptionsError(ValueError):
    """A side was sent options its mode does not define: a bug of the gate that built them."""


@dataclass(frozen=True, kw_only=True)
class SideOptions:
    """What every side builds (``gates/spec.side_spec`` makes it from kern.yaml's profile;
    ``gates.side.session.Spec`` is the model part of it) and, in the subclasses, what each
    mode of ``gates.side.driver`` does with it. The loop side checks a spec with
    :func:`parse` before it starts the process, the side parses it again on its end: a key
    no mode's options define is an error there, never dropped."""

    MODE: ClassVar[str] = ""

    model: str  # "full" | "small"
    layout: str
    seed: int  # the target's seed: weights and caches (the workload's, unless hidden inputs)
    weight_sets: int
    context: int
    steps: int
    rows: list  # the batch sizes this side runs
    state_dtype: str | None = "bf16"
    world: int = 1  # processes, one per rank (gates/ranks.py starts them)
    collective_timeout_s: float = 600.0  # a rank's wait on the others' collectives
    # the options as sent (echoed in the side's result; compared by nothing)
    sent: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, d: dict) -> "SideOptions":
        names = [f.name for f in fields(cls) if f.name != "sent"]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise OptionsError(
                f"the {cls.MODE} side was sent option(s) {', '.join(unknown)} that "
                f"gates/protocol.py's {cls.__name__} does not define (expected among "
                f"{', '.join(names)}): a bug of the gate that built the spec; it must stop "
                f"sending them, or {cls.__name__} define them")
        required = [f.name for f in fields(cls) if f.default is MISSING
                    and f.default_factory is MISSING]
        missing = [k for k in required if k not in d]
        if missing:
            raise OptionsError(f"the {cls.MODE} side was not sent {', '.join(missing)}, which "
                               f"{cls.__name__} requires: a bug of the gate that built the spec")
        return cls(**d, sent=dict(d))


@dataclass(frozen=True, kw_only=True)
class RunOptions(SideOptions):
    """``run``: a step per batch size (kern step, kern profile, the loop's profile of main)."""
    MODE: ClassVar[str] = "run"

    replays: int = 20  # timed replays per batch size on a GPU
    profile_rows: int = 0  # the per-op profile at this many rows (0: none)
    ref_rows: int = 0  # the step's error against the reference ops at this many rows (0: none)
    free: bool = True  # the profile's leave-one-out column


TAP_ROLES = ("record", "noise", "replay")


@dataclass(frozen=True, kw_only=True)
class TapOptions(SideOptions):
    """``tap``: the accuracy gate's sides (gates/side/tap.py)."""
    MODE: ClassVar[str] = "tap"

    role: str  # TAP_ROLES: main records, main's noise passes, the candidate replays
    budget_mb: int  # device memory the kept op calls may take
    reference_calls_per_op: int  # calls of each op the pinned pass checks against the reference
    touched: list | None = None  # the ops the change touches (kept whole); None: every op
    record: str | None = None  # replay: the folder of main's recording (TapFiles)
    cross_layout: bool = False  # A ran another layout: B judged by its logits alone

    def __post_init__(self):
        if self.role not in TAP_ROLES:
            raise OptionsError(f"the tap side was sent role {self.role!r} (expected one of "
                               f"{', '.join(TAP_ROLES)}): a bug of the gate that built the spec")


@dataclass(frozen=True, kw_only=True)
class BenchOptions(SideOptions):
    """``bench``: a scorer side, driven over stdin (gates/side/bench_side.py)."""
    MODE: ClassVar[str] = "bench"

    attach: str | None = None  # the store's shared model to attach to (None: build it)


@dataclass(frozen=True, kw_only=True)
class StoreOptions(SideOptions):
    """``store``: builds the model once and shares it with the bench sides over CUDA IPC."""
    MODE: ClassVar[str] = "store"


OPTIONS = {o.MODE: o for o in (RunOptions, TapOptions, BenchOptions, StoreOptions)}


def parse(mode: str, spec: dict) -> SideOptions:
    """The options of a ``mode`` side from its spec (checked: :meth:`SideOptions.parse`)."""
    if mode not in OPTIONS:
        raise OptionsError(f"no side mode {mode!r} (expected one of {', '.join(OPTIONS)}): a "
                           f"bug of the gate that starts the side")
    return OPTIONS[mode].parse(spec)
