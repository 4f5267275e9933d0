"""What a judgment writes on disk, decided without touching one (pure; the shell that measures
folders and deletes tensors is gates/launch/disk.py).

* What one judgment of the configured workload writes at most (:func:`judgment_bytes`, from
  the machine profile and the gates' sections of kern.yaml): the tap's logits files (every row
  of every step, per rank), main's kept op calls (at most ``test.snapshot_budget_mb`` per
  rank), the replay's copies of main's recording where the sandbox copies rather than links,
  and the scorer's timed-output files of one run.
* Whether the folders it writes have that room plus a margin (:func:`shortfall`, over the
  :class:`Space` the shell measured; :class:`DiskShort` when short).
* Whether a side that failed ran out of disk (:func:`ran_out`): its log shows a failed write
  and the folder it wrote has almost nothing left. The folder's free space is measured by the
  launcher, so a side that only prints the words is not believed.
"""
from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

from ..protocol import tap_rows
from ..settings import AccuracySettings, MachineProfile, ScorerSettings
from .decision import DISK
from .hidden import candidates


MIB = 1 << 20


# room kept beyond the estimate: the documents (per-call digests), logs and spec files the
# estimate does not count, and whatever else writes to the same disk meanwhile
MARGIN_FRACTION = 0.10


MARGIN_MIN = 32 * MIB


# a side whose write failed while its folder had less than this free ran out of disk
LOW_BYTES = 64 * MIB


F32 = 4


# what a timed replay keeps beside its logits rows (top values, next token, state digests and
# sketches: a few words per row and recurrent tensor), bytes per row and per replay, at most
ROW_EXTRA = 64


TENSOR_EXTRA = 48


@dataclass(frozen=True)
class JudgmentBytes:
    """What one judgment writes at most, in bytes, by folder: the accuracy gate's tap
    (``runs/tap``, deleted when its verdict is made, before the scorer starts) and the
    scorer's timed outputs (``runs/bench``, deleted when its run ends)."""

    logits: int  # one tap pass's logits file, one rank
    kept: int  # main's kept op calls, every rank (:func:`kept_mb`)
    tap: int  # A's record and noise passes, B's replay and B's copies of main's recording
    scorer: int  # the larger of the scorer's run and its re-measurement

    @property
    def peak(self) -> int:
        """The most on disk at once: the tap's tensors are gone before the scorer writes."""
        return max(self.tap, self.scorer)

    @property
    def margin(self) -> int:
        return margin(self.peak)

    @property
    def need(self) -> int:
        return self.peak + self.margin

    def describe(self) -> str:
        return (f"{fmt_bytes(self.need)} (tap {fmt_bytes(self.tap)}: main's kept calls up to "
                f"{fmt_bytes(self.kept)}, logits {fmt_bytes(self.logits)} a pass; scorer "
                f"{fmt_bytes(self.scorer)}; margin {fmt_bytes(self.margin)})")


def margin(need: int) -> int:
    """Pure: the room kept beyond ``need`` bytes of writes."""
    return max(MARGIN_MIN, int(need * MARGIN_FRACTION))


def fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _vocab(model: str, layout: str, world: int) -> int:
    """The logits' width a rank writes: its share of the vocabulary on one process (the
    tap keeps ``step.logits``), the whole vocabulary gathered on several."""
    from kernels.k31.config import Dims, Layout, Shapes

    d = Dims.named(model)
    return d.vocab if world > 1 else Shapes(d, Layout.named(layout)).vocab


def kept_mb(machine: MachineProfile, accuracy: AccuracySettings) -> float:
    """Pure: what main's kept op calls take on one rank, in MiB: the machine profile's measured
    ``recording_mb`` where kern.yaml gives one, never more than ``test.snapshot_budget_mb`` (the
    tap's own cap). A recording larger than the measured figure still ends named: its side
    runs out of disk and is classed ``disk full``."""
    budget, measured = accuracy.snapshot_budget_mb, machine.recording_mb
    return measured if measured is not None and measured < budget else budget


def judgment_bytes(machine: MachineProfile, accuracy: AccuracySettings,
                   scorer: ScorerSettings | None = None, *, world: int = 1,
                   layout: str | None = None, base_world: int | None = None,
                   base_layout: str | None = None, copies: bool = True) -> JudgmentBytes:
    """Pure: what one judgment on ``machine`` (kern.yaml's machine profile) under the accuracy
    gate's and the scorer's settings writes at most (``scorer`` None: its re-measurement is
    not counted). ``world``/``layout``: the candidate's processes (``kern test --gpus``),
    ``base_*``: main's when they differ; ``copies``: the sandbox shows B main's recording by
    copying it (landlock, user) rather than by hard links (namespaces) or in place (off)."""
    from kernels.k31.config import Dims

    layout = layout or machine.layout
    a_world, a_layout = base_world or world, base_layout or layout
    buckets = list(machine.buckets)
    rows = tap_rows(machine.test_rows, buckets)
    # the hidden extra sizes are drawn per judgment: the largest ones it may draw
    pool = candidates(buckets, machine.test_rows)
    extra = sorted(pool)[len(pool) - min(accuracy.hidden_rows, len(pool)):]
    per_row = machine.test_steps * F32
    logits_a = (sum(rows) + sum(extra)) * per_row * _vocab(machine.model, a_layout, a_world)
    logits_b = (sum(rows) + sum(extra)) * per_row * _vocab(machine.model, layout, world)
    kept = int(kept_mb(machine, accuracy) * MIB) * a_world
    # A: logits_a, kept_a, then (B not identical) logits_a2 and logits_aref; B: logits_b and,
    # copied, every file of main's recording it reads
    tap = a_world * 3 * logits_a + kept + world * logits_b
    if copies:
        tap += kept + a_world * logits_a
    d = Dims.named(machine.model)
    recurrent = 2 * d.n_layers  # KDA state and conv window per layer, an upper bound
    vocab = _vocab(machine.model, layout, world)
    replay = sum(b * (vocab * F32 + ROW_EXTRA + recurrent * 2 * F32) for b in buckets) \
        + recurrent * TENSOR_EXTRA
    rounds = max(machine.rounds, scorer.reverify_rounds if scorer is not None else 1)
    # A B B A per round; every visit's file written when the sides alternate
    timed = 4 * rounds * machine.replays * replay * world
    return JudgmentBytes(logits=logits_a, kept=kept, tap=tap, scorer=timed)


# ------------------------------------------------------------------ room before a judgment
@dataclass(frozen=True)
class Space:
    """One folder a judgment writes: the bytes it writes there at most, and what its file
    system has (``device``: its ``st_dev``; folders on one device share the free bytes)."""

    folder: str
    need: int
    device: int
    free: int


class DiskShort(RuntimeError):
    """environment: the disk under runs/ lacks the room a judgment needs, or a side ran out
    of it. The operator acts (free space on that disk); nothing of the candidate is judged."""

    def __init__(self, message: str, folder: str | None = None, need: int | None = None,
                 free: int | None = None):
        super().__init__(message)
        self.folder, self.need, self.free = folder, need, free


REASON = DISK  # how every disk reason starts (the ledger's, kern's stderr)


def shortfall(spaces: list[Space]) -> Space | None:
    """Pure: the first folder whose device has less free than the most any of its folders
    needs (its writes come one after another) plus the margin, with ``need`` that figure; None
    when every device has room."""
    by_device: dict = {}
    for s in spaces:
        by_device.setdefault(s.device, []).append(s)
    for group in by_device.values():
        worst = max(group, key=lambda s: s.need)
        need = worst.need + margin(worst.need)
        if worst.free < need:
            return Space(worst.folder, need, worst.device, worst.free)
    return None


def short_message(s: Space, what: str = "one judgment") -> str:
    return (f"{REASON}: {s.folder} has {s.free} bytes free ({fmt_bytes(s.free)}); {what} writes "
            f"up to {s.need} bytes ({fmt_bytes(s.need)}) there with its margin: the operator "
            f"must free space on the disk holding it (old runs/bench and runs/tap folders can "
            f"go), or lower test.snapshot_budget_mb in kern.yaml")


# ------------------------------------------------------------------ a side that ran out
# what a failed write says: the OS's words (Python's OSError, a C library's perror), torch's
# writer (its zip writer checks the position after each write: "unexpected pos N vs M")
_WRITE_FAILED = ("no space left on device", "[errno 28]", "enospc", "unexpected pos",
                 "file write failed", "pytorchstreamwriter failed", "disk quota exceeded")


def ran_out(tail: str, free: int | None) -> bool:
    """Pure: a side whose log ends with ``tail`` ran out of disk: its log shows a failed write
    and its folder has less than :data:`LOW_BYTES` free (``free``, measured by the caller
    after the side ended; None: unknown, then never)."""
    if free is None or free >= LOW_BYTES:
        return False
    low = tail.lower()
    return any(w in low for w in _WRITE_FAILED)


def disk_line(folder: Path, free: int | None) -> str:
    """The line a launcher adds to a side's last words when it ran out of disk."""
    return (f"{REASON}: no space left on the disk holding {folder} ({free} bytes free there "
            f"after the side's write failed)")


def is_enospc(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)
