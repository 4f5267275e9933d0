"""The subprocess boundary's shared names: what the loop process and a side process both
read and write, defined once for both.

Imported by the coordinator (``gates/accuracy.py``, ``gates/launch/process.py``, ``gates/launch/ranks.py``,
``gates/scorer.py``) and by the side (``gates/side/``); it imports nothing of either (only the
standard library), so the side reaches no coordinator module through it. gates/side/ imports
from gates/ only this module, ``gates/interpreter.py`` and ``gates/logits.py``
(tests/test_layers.py holds it to that).

:class:`SideOptions` and one subclass per mode of ``gates.side.driver`` (:data:`OPTIONS`):
what a side is sent in its spec file, checked by :func:`parse` on both ends.

The hand-over: :data:`IMPORTED`, the side's first line once it imported the candidate's tree;
the coordinator's answer, :func:`handover_line` (read back with :func:`read_handover`), holds
the judgment's :class:`Hidden` inputs. :data:`MEMORY_VARIABLE`: a side's address-space cap.

:class:`BenchCommand` and one subclass per request of the scorer to a bench side
(:data:`COMMANDS`), one JSON line each, checked by :func:`command` on the side's end.

:class:`TapFiles`: the files of one tap side's folder (``runs/tap/<commit>-<key>/``). Main's
recording is written by its ``record`` and ``noise`` roles and read by the candidate's
``replay`` and by the verdict; a side of several ranks writes rank 0's tensors in the folder
itself and rank r's in ``rank<r>/`` under it, each rank's document beside the merged one as
the launcher names it (:func:`rank_document`: ``record.rank<r>.json``). :func:`tap_rows`: the
batch sizes a tap runs, computed by both ends.
"""
from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

# ------------------------------------------------------------------ the hand-over
MEMORY_VARIABLE = "KERN_SIDE_MEMORY_BYTES"  # the driver caps its address space at this
EXPECTS_CUDA = "KERN_SIDE_EXPECTS_CUDA"  # "1": the gates see a GPU, so a side without one fails
IMPORTED = '{"imported": true}'  # a side's first line on stdout: the candidate's tree is imported
HELD_KEY = "held"  # a held side's first line (gates/side/driver.py hold_for_go): at its hold point
GO = '{"go": true}'  # the coordinator's answer to it, once the side may go on (gates/rules/overlap.py)
SEED_BOUND = 2**32  # input seeds are drawn from [0, SEED_BOUND)


class HiddenError(ValueError):
    """A record of hidden inputs is malformed; the message names its source and who acts."""


@dataclass(frozen=True)
class Hidden:
    """One judgment's hidden inputs (plain data; drawn by ``gates/rules/hidden.py``)."""

    input_seed: int
    extra_rows: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return {"input_seed": self.input_seed, "extra_rows": list(self.extra_rows)}

    @staticmethod
    def from_dict(d, source: str = "hidden inputs") -> "Hidden":
        """The inverse of :meth:`to_dict`; anything else raises :class:`HiddenError` naming
        ``source`` (where ``d`` came from) and what was expected."""
        if not isinstance(d, dict) or set(d) != {"input_seed", "extra_rows"}:
            raise HiddenError(f"{source}: expected {{'input_seed': int, 'extra_rows': [int, ...]}}, "
                              f"found {d!r}")
        seed, rows = d["input_seed"], d["extra_rows"]
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_BOUND:
            raise HiddenError(f"{source}: input_seed: expected an integer in [0, {SEED_BOUND}), "
                              f"found {seed!r}")
        if not isinstance(rows, (list, tuple)) or any(
                isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in rows) \
                or len(set(rows)) != len(rows):
            raise HiddenError(f"{source}: extra_rows: expected distinct positive integers, "
                              f"found {rows!r}")
        return Hidden(seed, tuple(rows))

    def describe(self) -> str:
        """One line for a report, shown after the verdict."""
        rows = ", ".join(map(str, self.extra_rows)) if self.extra_rows else "none"
        return f"input seed {self.input_seed}, extra batch sizes {rows}"


def held_line(kernels: bool, cuda: bool, triton: bool) -> str:
    """A held side's first line: it is at its hold point, with what it had done by then (a
    tree's module imported, a CUDA context made, Triton imported)."""
    return json.dumps({HELD_KEY: True, "kernels": bool(kernels), "cuda": bool(cuda),
                       "triton": bool(triton)}) + "\n"


def read_held(line: str) -> dict | None:
    """The report of :func:`held_line` in ``line``, or None when it is not one."""
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    if not isinstance(msg, dict) or msg.get(HELD_KEY) is not True:
        return None
    return {k: bool(msg.get(k)) for k in ("kernels", "cuda", "triton")}


def is_go(line: bytes | str) -> bool:
    """Whether ``line`` is the coordinator's :data:`GO`."""
    try:
        return json.loads(line) == json.loads(GO)
    except ValueError:
        return False


def handover_line(hidden: dict | None) -> str:
    """The coordinator's answer to :data:`IMPORTED` in the run and tap modes: the hidden
    inputs (``Hidden.to_dict()``, or None for none) as one line."""
    return json.dumps({"hidden": hidden}) + "\n"


def read_handover(line: bytes | str) -> Hidden | None:
    """The side's reading of :func:`handover_line` (a malformed record raises
    :class:`HiddenError`)."""
    d = json.loads(line)["hidden"]
    return None if d is None else Hidden.from_dict(d, "the coordinator's hand-over line")


# Main's keep-copies on demand (gates/accuracy.py's MainKeeper, gates/side/tap.py): one JSON
# line each, after the hand-over. Main's record side says RECORDED once its document and logits
# are written and waits for KEEP_SAVE (write the kept op calls, then say SAVED) or KEEP_DROP;
# the candidate's replay, when its free pass differs, says WANT_KEPT and waits for KEPT_READY.
RECORDED = {"recorded": True}
SAVED = {"saved": True}
WANT_KEPT = {"want": "kept"}
KEEP_SAVE = {"keep": "save"}
KEEP_DROP = {"keep": "drop"}
KEPT_READY, KEPT_MISSING = {"kept": True}, {"kept": False}
SIDE_REQUESTS = (RECORDED, SAVED, WANT_KEPT)  # the lines a side's gate code sends after IMPORTED


def side_request(line: str) -> dict | None:
    """The request ``line`` (one line of a side's stdout) holds, when it is one of
    :data:`SIDE_REQUESTS` exactly; None for anything else (it goes to the side's log)."""
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if msg in SIDE_REQUESTS else None


@dataclass(frozen=True)
class SidePhases:
    """A side's own account of its process's time, in seconds of its own clock: what it
    measured itself (the coordinator adds the process's start and end around it).

    ``compile_s``: Triton compiling kernels or loading them from its cache, wherever it
    happened (the first step, a capture, the model's build): taken out of the span it fell in.
    None where this Triton reports no compile times (its interpreter compiles nothing: 0)."""

    driver_s: float  # from the driver's start to its result: what the side saw of its process
    build_s: float = 0.0  # the model built (a bench side: or attached to a store's lease)
    attach_s: float = 0.0  # a tap side: the store's weights attached, its own state built
    compile_s: float | None = None
    tap_s: float = 0.0  # the tap's hooked passes (free, pinned, repeat, band)
    capture_s: float = 0.0  # a bench side's warm-up steps and graph captures
    save_s: float = 0.0  # tensors written: logits, main's kept op calls
    wait_s: float = 0.0  # main's record side alive, waiting on the candidate's replay
    compiled: int = 0  # kernels Triton compiled in this process
    loaded: int = 0  # kernels it found in its cache

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def from_dict(d) -> "SidePhases | None":
        """The inverse of :meth:`to_dict`; None for a side that reported none (older)."""
        if not isinstance(d, dict) or "driver_s" not in d:
            return None
        return SidePhases(**{f.name: d[f.name] for f in fields(SidePhases) if f.name in d})


def tap_rows(test_rows: list[int], buckets: list[int], extra=()) -> list[int]:
    """The accuracy gate's batch sizes: the profile's test rows, the judgment's hidden extra
    ones (``extra``), then every bucket the scorer times that is not among them. A kernel
    special-cased to the bench's batch sizes must meet the gate at exactly those sizes,
    whatever a profile's test rows say; one special-cased to the visible sizes meets sizes
    it could not know. The spec a side gets holds the visible ones (``tap_rows(t, b)``); the
    side adds the hidden ones it is handed as ``tap_rows(spec_rows, [], extra)``."""
    out = list(dict.fromkeys(test_rows))
    out += [r for r in dict.fromkeys(extra) if r not in out]
    return out + [b for b in dict.fromkeys(buckets) if b not in out]



def rank_document(out: Path, rank: int) -> Path:
    """Where rank ``rank`` of a side launched as several ranks writes its document ``out``
    (``gates.launch.ranks.launch`` merges them into ``out``)."""
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
    """What every side builds (``gates/spec.side_spec`` makes it from kern.yaml's machine
    profile and target; ``gates.side.session.Spec`` is the model part of it) and, in the
    subclasses, what each mode of ``gates.side.driver`` does with it. The loop side checks a
    spec with :func:`parse` before it starts the process, the side parses it again on its
    end: a key no mode's options define is an error there, never dropped."""

    MODE: ClassVar[str] = ""

    model: str  # "full" | "small"
    layout: str
    seed: int  # the target's seed: weights and caches (the workload's, unless hidden inputs)
    weight_sets: int
    context: int
    steps: int
    rows: list  # the batch sizes this side runs
    state_dtype: str | None = "bf16"
    world: int = 1  # processes, one per rank (gates/launch/ranks.py starts them)
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
    budget_mb: float  # device memory the kept op calls may take, MiB (test.snapshot_budget_mb)
    reference_calls_per_op: int  # calls of each op the pinned pass checks against the reference
    touched: list | None = None  # the ops the change touches (kept whole); None: every op
    record: str | None = None  # replay: the folder of main's recording (TapFiles)
    cross_layout: bool = False  # A ran another layout: B judged by its logits alone
    # the store's weights to attach to (a file of CUDA IPC handles in the side's run folder)
    # and the sha256 of the bytes the store wrote (None: build the model); the decode state is
    # always the side's own, built in its process
    attach: str | None = None
    attach_sha256: str | None = None

    def __post_init__(self):
        if self.role not in TAP_ROLES:
            raise OptionsError(f"the tap side was sent role {self.role!r} (expected one of "
                               f"{', '.join(TAP_ROLES)}): a bug of the gate that built the spec")


@dataclass(frozen=True, kw_only=True)
class BenchOptions(SideOptions):
    """``bench``: a scorer side, driven over stdin (gates/side/replays.py)."""
    MODE: ClassVar[str] = "bench"

    attach: str | None = None  # the store's shared model to attach to (None: build it)


@dataclass(frozen=True, kw_only=True)
class StoreOptions(SideOptions):
    """``store``: builds the model's weights once and shares them with the bench sides of each
    scorer run that leases it (:class:`StoreLease`) over CUDA IPC, each lease with a decode
    state of its own (gates/side/store.py). Its context, rows and steps size no state: each
    lease says its own."""
    MODE: ClassVar[str] = "store"


@dataclass(frozen=True, kw_only=True)
class CompileOptions(SideOptions):
    """``compile``: main's kernels compiled, nothing judged (gates/launch/compiled.py): the model
    built as the spec says and one eager step per row, then again for each of ``more``."""
    MODE: ClassVar[str] = "compile"

    more: list = field(default_factory=list)  # further builds: [context, [rows...]] each


OPTIONS = {o.MODE: o for o in (RunOptions, TapOptions, BenchOptions, StoreOptions, CompileOptions)}


def parse(mode: str, spec: dict) -> SideOptions:
    """The options of a ``mode`` side from its spec (checked: :meth:`SideOptions.parse`)."""
    if mode not in OPTIONS:
        raise OptionsError(f"no side mode {mode!r} (expected one of {', '.join(OPTIONS)}): a "
                           f"bug of the gate that starts the side")
    return OPTIONS[mode].parse(spec)


# ------------------------------------------------------------------ the model store's requests
STORE_QUIT = "quit"  # the line that ends the model store


class StoreRequestError(ValueError):
    """The model store was sent a line that is none of its requests: a bug of the scorer."""


@dataclass(frozen=True)
class StoreLease:
    """A scorer run's lease of the store (gates/launch/store.py to gates/side/store.py): the
    weights verified against their build's digest, then a decode state built for this lease
    alone at ``context`` tokens for ``rows`` rows (the largest of them) and ``steps`` workload
    steps. The store answers ``{"lease": n, "weights_intact": bool, "state_s": s}``; where the
    weights changed no lease is open (the store is replaced)."""

    context: int
    rows: list
    steps: int
    # False: the weights alone (the accuracy gate's tap sides build each a state of their own):
    # no state is built for the lease
    state: bool = True

    def line(self) -> str:
        more = {} if self.state else {"state": False}
        return json.dumps({"lease": {"context": self.context, "rows": list(self.rows),
                                     "steps": self.steps, **more}}) + "\n"


@dataclass(frozen=True)
class StoreHandles:
    """The open lease's model as CUDA IPC handles for one bench side's process: a file of its
    own each (torch counts every handle sent as one consumer's, released when that process
    frees it). The store answers ``{"ready": path | None, "sha256": hex | None}``: None on a
    CPU (no IPC: the side builds its own model); ``sha256`` the bytes written there, which the
    side alone loads (:class:`Prepare`). ``weights``: the weights alone (a tap side builds
    its own state)."""

    weights: bool = False

    def line(self) -> str:
        return json.dumps({"handles": "weights" if self.weights else True}) + "\n"


@dataclass(frozen=True)
class StoreRelease:
    """The lease ends: its state dropped, the weights verified again. The store answers
    ``{"released": n, "weights_intact": bool, "freed": bool, "held_bytes": n, "shm": [its
    /proc/self/maps lines under /dev/shm] | None}`` (``freed``: the state left the device; CUDA IPC keeps a block until
    its consumers release it; ``shm``: the /dev/shm files it maps now, which the harness's
    sweep of its group's /dev/shm keeps)."""

    def line(self) -> str:
        return json.dumps({"release": True}) + "\n"


def store_request(line: str) -> "StoreLease | StoreHandles | StoreRelease | None":
    """The request one line on the store's stdin holds; None for :data:`STORE_QUIT` (the
    store ends); anything else raises :class:`StoreRequestError`."""
    text = line.strip()
    if text == STORE_QUIT:
        return None
    try:
        d = json.loads(text)
    except ValueError:
        d = None
    if d == {"cmd": "quit"}:  # Interactive.close's bench Quit, sent before STORE_QUIT
        return None
    if isinstance(d, dict) and set(d) == {"release"} and d["release"] is True:
        return StoreRelease()
    if isinstance(d, dict) and set(d) == {"handles"} and (d["handles"] is True or d["handles"] == "weights"):
        return StoreHandles(d["handles"] == "weights")
    lease = d.get("lease") if isinstance(d, dict) and set(d) == {"lease"} else None
    if isinstance(lease, dict) and set(lease) - {"state"} == {"context", "rows", "steps"} \
            and lease.get("state", False) is False \
            and all(isinstance(lease[k], int) and not isinstance(lease[k], bool) and lease[k] > 0
                    for k in ("context", "steps")) \
            and isinstance(lease["rows"], list) and lease["rows"] \
            and all(isinstance(r, int) and not isinstance(r, bool) and r > 0 for r in lease["rows"]):
        return StoreLease(lease["context"], lease["rows"], lease["steps"], "state" not in lease)
    raise StoreRequestError(f"the model store was sent {text[:200]!r} (expected {STORE_QUIT!r}, "
                            f"a lease {{'lease': {{'context', 'rows', 'steps'}}}}, "
                            f"{{'handles': true}} or {{'release': true}}): a bug of the scorer "
                            f"that sent it")


# ------------------------------------------------------------------ the scorer's commands


class CommandError(ValueError):
    """A bench side was sent a line that is no command of :data:`COMMANDS`: a bug of the
    scorer that sent it."""


@dataclass(frozen=True, kw_only=True)
class BenchCommand:
    """One request of the scorer (``gates/scorer.py``) to a bench side
    (``gates/side/replays.py``): one JSON object on the side's stdin, ``{"cmd": CMD, ...}``
    with the fields; the side answers with one JSON line, ``{"ok": true, ...}`` or
    ``{"ok": false, "error": ...}``, after the driver's :data:`IMPORTED`."""

    CMD: ClassVar[str] = ""

    def to_dict(self) -> dict:
        return {"cmd": self.CMD, **{f.name: getattr(self, f.name) for f in fields(self)}}

    @classmethod
    def parse(cls, d: dict) -> "BenchCommand":
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(d) - set(names) - {"cmd"})
        missing = [f.name for f in fields(cls) if f.default is MISSING
                   and f.default_factory is MISSING and f.name not in d]
        if unknown or missing:
            raise CommandError(
                f"the bench side's {cls.CMD!r} command takes {', '.join(names) or 'no fields'}; "
                f"it was sent {', '.join(unknown) or 'no'} other field(s) and lacks "
                f"{', '.join(missing) or 'none'}: a bug of the scorer that sent it")
        return cls(**{k: v for k, v in d.items() if k != "cmd"})


@dataclass(frozen=True, kw_only=True)
class Prepare(BenchCommand):
    """Build (or attach to the store's) model, compile and capture every bucket.
    -> build_s, capture_s, environment, workload, all_reduce_paths"""
    CMD: ClassVar[str] = "prepare"

    # the judgment's hidden inputs (Hidden.to_dict(): its input seed sets the workload), or None
    hidden: dict | None
    sketch_seed: int = 0  # the seed of the state sketches (gates/side/timed.py)
    claim: str | None = None  # the accuracy gate's verdict the timed outputs are held to
    # the store's sha256 of the model handles it wrote (the spec's attach): the side loads
    # those bytes only (the file lies in a run folder the candidate's side writes too)
    attach_sha256: str | None = None


@dataclass(frozen=True, kw_only=True)
class Time(BenchCommand):
    """``n`` timed replays of ``bucket`` rows on input sets ``first``, ``first + 1``, ...
    (None: the next unused). -> times, checks, untimed_ms (several ranks: and replicated_sha,
    of every replay's replicated bytes and the last one's gathered logits)"""
    CMD: ClassVar[str] = "time"

    bucket: int
    n: int
    first: int | None = None


@dataclass(frozen=True, kw_only=True)
class SaveRecord(BenchCommand):
    """Write the timed replays' outputs kept since the last save to ``path`` (one file per
    visit; None: keep them in the process's memory)."""
    CMD: ClassVar[str] = "save_record"

    path: str | None


@dataclass(frozen=True, kw_only=True)
class JudgeOutputs(BenchCommand):
    """Main's side: its timed outputs (``mine``: files, or ``"memory"`` for its own replays)
    against the candidate's (``theirs``); with ``band``, also main's band at this context: a
    few replays per bucket again with the touched ops on the protected reference, main and the
    candidate against that per request (``gates/side/timed.py``). -> timed (and band, band_s)"""
    CMD: ClassVar[str] = "judge_outputs"

    mine: list | str
    theirs: list | str
    near_tie_factor: float
    sample: dict | None = None  # {"rows": R, "seed": S}: also judge R rows drawn with seed S
    # {"ops": the touched ops (None: every op of main's tree), "kl_pass": ...}; needs a sample
    band: dict | None = None


@dataclass(frozen=True, kw_only=True)
class Verify(BenchCommand):
    """Graph against eager on an unseen input at ``bucket`` rows; with ``ops`` the eager
    run's op calls against the reference too (all, or for an op in ``sample`` the calls it
    lists). -> equal, max_abs_diff, nan (and ops)"""
    CMD: ClassVar[str] = "verify"

    bucket: int
    ops: bool = False
    sample: dict | None = None  # {op: [call index, ...]}


@dataclass(frozen=True, kw_only=True)
class Bandwidth(BenchCommand):
    """The card's read ceiling (gates/side/ceiling.py). -> Bps, torch_sum_Bps, shapes, best"""
    CMD: ClassVar[str] = "bandwidth"


@dataclass(frozen=True, kw_only=True)
class Peers(BenchCommand):
    """The peer implementations' times (gates/side/peers.py). -> kda_decode"""
    CMD: ClassVar[str] = "peers"


@dataclass(frozen=True, kw_only=True)
class RooflineCost(BenchCommand):
    """The roofline bytes and FLOPs of one step at ``bucket`` rows, per op row."""
    CMD: ClassVar[str] = "cost"

    bucket: int


@dataclass(frozen=True, kw_only=True)
class Baseline(BenchCommand):
    """``n`` timed steps of ``kind`` (the eager reference step, torch.compile) at ``bucket``
    rows. -> times, first_call_s (or error)"""
    CMD: ClassVar[str] = "baseline"

    kind: str
    bucket: int
    n: int


@dataclass(frozen=True, kw_only=True)
class Quit(BenchCommand):
    """Stop serving; the driver then writes its summary."""
    CMD: ClassVar[str] = "quit"


COMMANDS = {c.CMD: c for c in (Prepare, Time, SaveRecord, JudgeOutputs, Verify, Bandwidth, Peers,
                               RooflineCost, Baseline, Quit)}


def command(d: dict) -> BenchCommand:
    """The command one line on a bench side's stdin holds (checked: :meth:`BenchCommand.parse`)."""
    cmd = d.get("cmd") if isinstance(d, dict) else None
    if cmd not in COMMANDS:
        raise CommandError(f"unknown command {cmd!r} (expected one of {', '.join(COMMANDS)}): "
                           f"a bug of the scorer that sent it")
    return COMMANDS[cmd].parse(d)
