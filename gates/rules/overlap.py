"""The next judgment's start beside another judgment's scorer (issue 34, "the next judgment's CPU
work overlapped with the scorer's rounds; no GPU work runs beside timed rounds"). Pure: the
loop's shell (harness/orchestrator.py), the accuracy gate's (gates/accuracy.py
:class:`~gates.accuracy.EarlySides`) and the side's driver (gates/side/driver.py, its hold
point) act on these answers.

The contract (docs/farm.md, "the next judgment beside the scorer"):

* :data:`STEPS` are a judgment's steps up to its first tap pass, in order, each with whether it
  may run while another judgment's scorer does GPU work (:func:`allowed_beside`). Allowed: the
  harness's work that reads git and the disk (scope, room, recording shape, main's
  compiled-cache lookup, the checkouts) and a tap side's start up to the **hold point**
  (:data:`HOLD`): the interpreter, the sandbox, ``import torch`` (no CUDA context: it is made
  lazily) and the gates' own side code. Not allowed: anything that touches CUDA, importing or
  running a tree's code (a candidate's ``kernels/`` import can launch GPU work, and so can
  main's, an earlier candidate merged), main's compile side (after a merge: it builds the
  model and launches every kernel), building the model, the hidden inputs' hand-over.
* A side held at the hold point goes on only on one "go" line, sent when :func:`go_due`:
  the scorer's last GPU work has ended (its timed rounds, the re-measure of a large gain, the
  band its main side measures after the rounds: every ``run_bench``, and its lease of the
  model store released with them, gates/judging.py) and the next judgment holds the slot the sides were placed
  on (no other judgment's timed rounds can start on it meanwhile).
* Which judgment is prepared (:func:`next_judged`): the one judged next on the slot, in
  judging order: the next member of the current batch, or, after the batch's last member, the
  first member of the next batch (a batch of one included). A next batch's hidden draw is made
  as its first member is prepared: every job of a tick froze when the tick collected it, before
  any judging, so the draw is still made after the batch's last member froze
  (gates/rules/batch.py ``draw_due``). It stays in the coordinator until the side's hand-over,
  after its go and its tree's import; it reaches the ledger when it does today (a batch of
  one's with its row, a batch's once it is settled).
* Which tap sides start early (:func:`early_sides`): main's record side and the candidate's
  replay, or only the replay when the batch's main side already holds its recording; none
  where main's compiled cache is not made yet (making it is GPU work), or the judgment would
  not start the replay beside main's side (sandbox off, ``test.replay_beside`` off).
* What was prepared is ended, every process and its folders in runs/tap, when the current
  judgment's end means the next must not run as prepared (:func:`keep_prepared`).
* The slot's model store (gates/rules/store.py; kept across judgments by ``kern loop``): any
  work of it (its start, a lease, the weights' digest, a release) is GPU work, step ``store``,
  never beside another judgment's scorer. The current judgment's scorer leases it as part of
  its own GPU work and releases it (the weights verified) before the go is due; nothing
  prepared early is given the store. Sides started early never lease it
  (:func:`tap_lease`): their spec and their sandbox are fixed when they start, before any
  lease, so they build their own model after their go, as before the store; a gate that
  adopts them leases none (its noise side builds its own too). A gate that starts its own
  sides (nothing prepared, or what was prepared is ended) leases it inside its slot, after
  the scorer before it ended.
"""
from __future__ import annotations

from dataclasses import dataclass

A, B = "A record", "B replay"  # the tap sides, by the accuracy report's part names


@dataclass(frozen=True)
class Step:
    """One step of a judgment before its first tap pass: who does it (``harness``: the
    coordinator; ``side``: a tap side's process) and whether it may run beside another
    judgment's scorer (``beside``), and why."""

    name: str
    who: str
    beside: bool
    why: str


STEPS = (
    Step("scope", "harness", True, "git: the commit's paths and editable sources"),
    Step("room", "harness", True, "statvfs of runs/ (the tensors of killed runs swept)"),
    Step("shape", "harness", True, "git: the tap spec and the touched ops"),
    Step("compiled_lookup", "harness", True, "main's compiled Triton cache looked up, never made"),
    Step("checkout", "harness", True, "git worktrees of both commits"),
    Step("interpreter", "side", True, "a Python interpreter starts"),
    Step("sandbox", "side", True, "the side's confinement is entered (mounts, landlock)"),
    Step("torch_import", "side", True, "import torch makes no CUDA context (it is made lazily)"),
    Step("gates_side_code", "side", True, "the gates' own side modules (tamper, tap, fingerprint)"),
    # ---- the hold point: nothing below runs before "go"
    Step("compile_main", "harness", False, "main's compile side builds the model and launches "
         "every kernel (after a merge: the new main's)"),
    Step("store", "harness", False, "the slot's model store started, leased, verified or "
         "released: it builds or digests the weights on the device"),
    Step("tree_import", "side", False, "a tree's import-time code can launch GPU work (a "
         "candidate's kernels/, or main's: an earlier candidate merged)"),
    Step("cuda", "side", False, "a CUDA context, or any call that initializes the driver"),
    Step("model_build", "side", False, "the model's weights and state on the device"),
    Step("hand_over", "side", False, "the hidden inputs, after the tree's import"),
    Step("tap", "side", False, "the tap's passes on the device"),
)
HOLD = next(s.name for s in STEPS if not s.beside)  # the first step that waits for "go"


def allowed_beside(step: str) -> bool:
    """Whether ``step`` (a name of :data:`STEPS`) may run while another judgment's scorer does
    GPU work. A name not among them is a bug of the caller (ValueError), never allowed."""
    for s in STEPS:
        if s.name == step:
            return s.beside
    raise ValueError(f"overlap: no judgment step {step!r}; expected one of {[s.name for s in STEPS]}")


def before_hold(who: str) -> tuple[str, ...]:
    """The steps of ``who`` ("harness", "side") that run before the hold point, in order."""
    out = []
    for s in STEPS:
        if not s.beside:
            break
        if s.who == who:
            out.append(s.name)
    return tuple(out)


def go_due(scorer_gpu_done: bool, holds_slot: bool) -> bool:
    """Whether held sides may go on: the other judgment's scorer did its last GPU work (every
    run of it, the re-measure included, its lease of the model store released, the weights
    verified: the store, kept across judgments, then idles) and the next judgment holds the
    slot they were placed on."""
    return scorer_gpu_done and holds_slot


@dataclass(frozen=True)
class Next:
    """The judgment prepared beside the current one's scorer."""

    number: int
    same_batch: bool  # a later member of the current one's batch: its draw and recording
    batch: bool  # a member of a batch of several (main's side serves the batch's life)


def next_judged(pending: tuple[int, ...], following: tuple[int, ...] | None) -> Next | None:
    """Pure: the judgment after the current one, ``pending[0]`` (its batch's members not judged
    yet, it first), where ``following`` is the next batch's members (None: none). A merge of
    the current one cannot change it: a merge moves the members after it in its own batch to
    a batch of their own (``batch.rest``), which :func:`keep_prepared` ends; the next batch's
    members keep their own base."""
    if not pending:
        raise ValueError("overlap: the current judgment is its batch's first pending member; "
                         "got none pending (a bug of the caller, harness/orchestrator.py)")
    if len(pending) > 1:
        return Next(pending[1], same_batch=True, batch=True)
    if following:
        return Next(following[0], same_batch=False, batch=len(following) > 1)
    return None


@dataclass(frozen=True)
class NextFacts:
    """The next judgment, as known when the current one enters its scorer."""

    main_side_serves: bool  # its batch's main side recorded and serves it (a later member)
    sandbox: str  # the chosen mechanism (gates.launch.sandbox.chosen): "off" or a confinement
    replay_beside: bool  # kern.yaml test.replay_beside
    compiled_ready: bool  # main's compiled cache for its base is made (a lookup finds it)


@dataclass(frozen=True)
class Early:
    """Which tap sides start early (``sides``: of ``(A, B)``; empty: none) and why."""

    sides: tuple[str, ...]
    why: str


def early_sides(f: NextFacts) -> Early:
    """Pure: which of the next judgment's tap sides start beside the current one's scorer."""
    if not f.compiled_ready:
        return Early((), "main's compiled cache for its base is not made: making it is GPU work, "
                         "which waits for the scorer's end")
    if f.sandbox == "off":
        return Early((), "sandbox off: the replay starts only once main recorded and its files "
                         "are marked, and a batch shares no recording")
    if f.main_side_serves:
        return Early((B,), "the batch's main side holds its recording: the replay alone starts")
    if not f.replay_beside:
        return Early((), "test.replay_beside off: the replay starts once main recorded")
    return Early((A, B), "main records for this judgment: both tap sides start")


@dataclass(frozen=True)
class EndFacts:
    """How the current judgment ended, as far as the prepared next one cares."""

    halted: bool  # the loop stops (a full disk, the operator)
    failed: bool  # judging raised (a crash of the gates, a lost node)
    merged: bool  # it merged: main moved
    batch_member: bool  # the prepared judgment is a member of the current one's batch
    main_side_serves: bool  # that batch's main side still serves its recording


def keep_prepared(e: EndFacts, prepared: tuple[str, ...]) -> tuple[bool, str]:
    """Pure: whether the next judgment may run on what was prepared for it (``prepared``: the
    sides started, :func:`early_sides`), and why not. A prepared replay alone counted on the
    batch's main side, so it goes when that side no longer serves. A merge keeps what was
    prepared for the next batch's first member: a job's first judgment is against its own
    base, which no merge moves (its draw, its main's record side and its replay are what its
    gate starts; the gate checks they are, ``EarlySides.serves``, and ends them if not); a win
    on the moved main is rebased and judged again on sides of its own, never prepared ones."""
    if e.halted:
        return False, "the loop stops: the next judgment is not judged now"
    if e.failed:
        return False, "judging failed: the next judgment starts afresh"
    if e.merged and e.batch_member:
        return False, "a merge ended the batch's recording: the next member gets a new draw"
    if prepared == (B,) and not (e.batch_member and e.main_side_serves):
        return False, "the batch's main side no longer serves: main records again"
    return True, ""


def tap_lease(early: tuple[str, ...]) -> tuple[bool, str]:
    """Pure: whether an accuracy gate may lease the slot's model store for its tap sides, where
    ``early`` are the sides it adopted from :func:`early_sides` (empty: none; it starts its own),
    and why not. Sides started early were started before any lease: the ``attach`` keys of
    their spec and the store's sandbox group they would join are fixed at their start, and a
    lease made for them while they wait would be store work beside the other judgment's
    scorer. So they build their own model after their go, and the gate leases none (every
    check stays: each side building its own model is the gate as it was before the store)."""
    unknown = [s for s in early if s not in (A, B)]
    if unknown:
        raise ValueError(f"overlap: no tap side {unknown[0]!r}; expected of {(A, B)} (a bug of "
                         f"the caller, gates/accuracy.py)")
    if early:
        return False, (f"{' and '.join(early)} started early, before any lease (their spec and "
                       f"sandbox fixed then): each side builds its own model")
    return True, ""
