"""The scorer's turn: with ``farm.isolate`` (kern.yaml), the scorer rounds of every judgment on
this host take turns, one host-wide lock (``runs/slots/scorer.lock``) around each A/B, while the
accuracy gates of other judgments go on in parallel on their own slots. For hosts where a
neighbour's traffic (PCIe, host memory, CPU launch threads) widens the A-vs-A band of a
judgment; without it (the default) judgments never wait for each other."""
from __future__ import annotations

import fcntl
from contextlib import contextmanager
from pathlib import Path

from ..events import ScorerTurnWaits


@contextmanager
def scorer_turn(runs: Path, isolate: bool, progress=None):
    """Hold this host's scorer turn for the block where ``isolate`` (``progress`` is told
    :class:`~gates.events.ScorerTurnWaits` when another judgment holds it); else nothing."""
    if not isolate:
        yield
        return
    folder = Path(runs) / "slots"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "scorer.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress:
                progress(ScorerTurnWaits())
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
