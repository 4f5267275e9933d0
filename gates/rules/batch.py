"""Main recorded once per batch of frozen candidates (issue 34): which candidates share one hidden
draw and one recording of main, when the draw is made, when it may be written down and when the
recording goes. Pure: the loop's shell (harness/orchestrator.py) and the accuracy gate's
(gates/accuracy.py :class:`~gates.accuracy.MainRecording`) act on these answers.

The contract (docs/gates.md, "main recorded once per batch"):

* A candidate is **frozen** when its commit is fixed (its agent has ended and the tick collected
  it). A batch is a run of frozen candidates, consecutive in judging order, against the same
  main commit and the same recording shape (the tap spec, the touched ops, the device: what
  decides main's recording besides the draw). Consecutive: the tick judges in number order and
  holds at most one recording at a time, so a 12-hour loop never holds more than one batch's.
* The batch's draw is made only once every member is frozen (:func:`draw_due`): no member can
  have seen it, or adapted to it, while its commit could still change. It reaches each member's
  processes only after their imports, as for a judgment of its own (the gate's hand-over).
* Members share a draw only under a sandbox (:func:`share_allowed`): a member's processes see the
  draw, and only a sandbox keeps them from leaving it where a later member's processes read it
  (docs/sandbox.md: a side writes its run folder and private folders alone).
* A merge ends the batch (:func:`judged`): main changed, the merged member's row is written with
  its draw, and the members after it get a new draw and a new recording (:func:`rest`), never
  this one's.
* The draw is written down (the ledger's ``hidden``) only once the batch is settled: its last
  verdict made, or a merge (:func:`written_down`); the recording's tensors go then too
  (:func:`recording_needed`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Frozen:
    """A candidate waiting for its judgment with its commit fixed."""

    number: int  # its attempt; the judging order is ascending
    rev: str  # its commit
    base: str  # the main commit it is judged against
    shape: str  # what decides main's recording besides the draw (gates.accuracy.recording_shape)


@dataclass(frozen=True)
class Batch:
    """Candidates judged one after another on one hidden draw and one recording of ``base``."""

    base: str
    shape: str
    members: tuple[int, ...]  # attempt numbers, in judging order

    def __post_init__(self):
        if not self.members:
            raise ValueError("a batch holds at least one candidate")


def share_allowed(sandbox_mechanism: str) -> bool:
    """Whether candidates may share a draw under this sandbox mechanism
    (``gates.launch.sandbox.chosen``): not under ``off``, where a member's processes could leave
    the draw they were shown where a later member's read it."""
    return sandbox_mechanism != "off"


def plan(frozen: Sequence[Frozen], share: bool = True) -> list[Batch]:
    """The batches of ``frozen`` (in judging order): the maximal runs of consecutive candidates
    with the same base and shape; every candidate a batch of its own unless ``share``."""
    out: list[Batch] = []
    for c in frozen:
        last = out[-1] if out else None
        if share and last is not None and (last.base, last.shape) == (c.base, c.shape):
            out[-1] = Batch(last.base, last.shape, last.members + (c.number,))
        else:
            out.append(Batch(c.base, c.shape, (c.number,)))
    return out


def draw_due(batch: Batch, frozen: Iterable[int]) -> bool:
    """Whether ``batch``'s draw may be made now: every member is among ``frozen`` (the numbers of
    the candidates whose commits are fixed)."""
    return set(batch.members) <= set(frozen)


@dataclass(frozen=True)
class BatchState:
    """Where a batch's judging stands: the members judged so far (in order) and the one that
    merged, if any (the batch ends there)."""

    batch: Batch
    judged: tuple[int, ...] = ()
    merged: int | None = None

    @property
    def pending(self) -> tuple[int, ...]:
        """The members not judged yet (after a merge: those :func:`rest` moves to a new draw)."""
        return self.batch.members[len(self.judged):]


def next_member(state: BatchState) -> int | None:
    """The member judged next on this batch's draw and recording; None once settled."""
    if settled(state):
        return None
    return state.pending[0]


def judged(state: BatchState, number: int, merged: bool) -> BatchState:
    """``state`` after ``number``'s verdict (``merged``: it merged, and main changed). Members are
    judged in order: another number is a bug of the caller."""
    if next_member(state) != number:
        raise ValueError(f"batch of main {state.batch.base[:12]}: expected the verdict of "
                         f"#{next_member(state)}, got #{number} (members {list(state.batch.members)}, "
                         f"judged {list(state.judged)})")
    return BatchState(state.batch, state.judged + (number,), number if merged else None)


def settled(state: BatchState) -> bool:
    """No member still needs this batch's recording: every verdict made, or one merged."""
    return state.merged is not None or not state.pending


def recording_needed(state: BatchState) -> bool:
    """Whether main's recording of this batch must be kept (some member still to be judged on it,
    and main unchanged)."""
    return not settled(state)


def written_down(state: BatchState, closing: bool = False) -> tuple[int, ...]:
    """The members whose rows may get the batch's draw now: all judged ones once the batch is
    settled, or once it is closed early (``closing``: the loop stops; the unjudged members are
    judged later on a draw of their own); none before."""
    return state.judged if settled(state) or closing else ()


def rest(state: BatchState) -> Batch | None:
    """After a merge: the members still to judge, as a batch of their own (a new draw, made now,
    after they all froze; a new recording). None when nothing is left, or no merge ended it."""
    if state.merged is None or not state.pending:
        return None
    return Batch(state.batch.base, state.batch.shape, state.pending)


def recording_serves_on(side_alive: bool, main_ok: bool, changed: bool) -> bool:
    """Whether main's recording, after a member's replay, serves the batch's next member: main's
    side still runs (holding its kept op calls), it recorded, and the replay left the recording
    as it was (``changed``: the file marks moved; it is set aside, never reused). Otherwise the
    next member records main again, on the batch's draw."""
    return side_alive and main_ok and not changed
