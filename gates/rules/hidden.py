"""The gates' hidden inputs: drawn per judgment in the harness process, shown only afterwards.

kern.yaml is readable in every worktree, so its test rows and its target seed are inputs an
agent can see and special-case. Each judgment therefore draws, from the harness process's own
randomness (``random.SystemRandom``, the operating system's entropy), an **input seed** (the
workload's tokens and positions; weights and caches stay seeded by ``target.seed``) and a few
**extra batch sizes** for the accuracy gate's tap. They reach a side only over its stdin,
after it has imported the candidate's tree (``gates/launch/process.py``, ``gates/side/driver.py``), never in
kern.yaml, a spec file, argv or the environment; the ledger records them once the decision
is made, so a judgment can be replayed exactly (``kern test REV --vs BASE --replay-attempt N``).

Loop-side: nothing here imports torch or the kernel tree. The inputs themselves, what the
side reads back, are ``gates/protocol.py``'s :class:`Hidden`.
"""
from __future__ import annotations

import random

from ..protocol import SEED_BOUND, Hidden
from ..settings import AccuracySettings, MachineProfile


def candidates(buckets, test_rows) -> list[int]:
    """Pure: the batch sizes an extra row count may take, ascending: 1 .. the largest bucket,
    neither a bucket nor a visible test row (those the gate runs anyway)."""
    seen = set(buckets) | set(test_rows)
    return [r for r in range(1, max(buckets) + 1) if r not in seen]


def draw(rng: random.Random, buckets, test_rows, count: int = 2) -> Hidden:
    """Pure given ``rng``: an input seed and ``count`` distinct extra row counts from
    :func:`candidates`, ascending. Where fewer than ``count`` qualify (the cpu profile's
    buckets [2, 4] with test rows 1 and 3 leave none), every one that does is drawn and the
    hidden part is the input seed and those: a judgment never fails for want of sizes."""
    if count < 0:
        raise ValueError(f"hidden: count of extra rows must be >= 0, got {count}")
    pool = candidates(buckets, test_rows)
    rows = tuple(sorted(rng.sample(pool, min(count, len(pool)))))
    return Hidden(rng.randrange(SEED_BOUND), rows)


def misfit(h: Hidden, buckets, test_rows) -> str | None:
    """Pure: why ``h`` cannot be this profile's hidden inputs (extra sizes it would never
    draw: another profile's, or a hand-edited record), or None."""
    bad = [r for r in h.extra_rows if r not in candidates(buckets, test_rows)]
    if not bad:
        return None
    return (f"extra batch size(s) {', '.join(map(str, bad))} are not hidden sizes of this profile "
            f"(1 .. {max(buckets)}, neither a bucket {list(buckets)} nor a test row {list(test_rows)})")


def fresh(buckets, test_rows, count: int = 2) -> Hidden:
    """This judgment's hidden inputs, from the operating system's randomness (never a seeded
    generator: a seed would be one more thing a candidate could learn)."""
    return draw(random.SystemRandom(), buckets, test_rows, count)


def for_machine(machine: MachineProfile, accuracy: AccuracySettings) -> Hidden:
    """:func:`fresh` for a machine profile of kern.yaml (``test.hidden_rows`` extra sizes)."""
    return fresh(machine.buckets, machine.test_rows, accuracy.hidden_rows)
