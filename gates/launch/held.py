"""A side started early, held at its hold point until the coordinator says go
(gates/rules/overlap.py: the next judgment's start beside another judgment's scorer).

A :class:`Hold` is what the launcher hands over instead of the side's hand-over object (its
``hidden`` argument, ``gates/launch/process.py``): the launcher starts the driver with
``--hold``, the side's first line is ``protocol.held_line`` (what it had imported by then), and
:meth:`Hold.held`, in the hand-over's thread, answers it with ``protocol.GO`` only once
:meth:`Hold.go` was called, or with nothing (the side's stdin closes: it exits) once
:meth:`Hold.cancel` was. The hand-over proper (the hidden inputs after the tree's import, the
dialogue after it) is the object given to :meth:`Hold.attach` before the go, which the hold
passes every later line on to. The side's limit counts from the go (``went_at``): its wait
at the hold point is no part of its work."""
from __future__ import annotations

import threading
import time

from ..protocol import GO, handover_line
from .after_import import AfterImport, Dialogue


class Hold(Dialogue):
    """A held side's hand-over: its hold, its go, then ``target``'s hand-over."""

    def __init__(self, target=None):
        self.target = target  # an AfterImport, a Dialogue, or the hidden inputs (a dict or None)
        self.started = time.monotonic()  # the launcher starts the process now
        self.held_at: float | None = None  # time.monotonic() of the side's held line
        self.went_at: float | None = None  # time.monotonic() of the go (None: not yet, or never)
        self.report: dict | None = None  # what the side had done by its hold point
        self.pids: list[int] = []  # its processes that reached their hold point
        self._go, self._cancel, self._attached = threading.Event(), threading.Event(), False

    def attach(self, target) -> None:
        """The hand-over the side gets once it imported its tree (before :meth:`go`)."""
        self.target, self._attached = target, True

    def go(self) -> None:
        """Let the side go on (gates/rules/overlap.py ``go_due``)."""
        if self.went_at is None:
            self.went_at = time.monotonic()
        self._go.set()

    def cancel(self) -> None:
        """The side is not needed: its held line gets no go, its stdin closes and it exits."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set() and self.went_at is None

    def held(self, proc, report: dict) -> str:
        """The answer to ``proc``'s held line: the go line once :meth:`go` was called; "" when
        it was cancelled or the process ended first."""
        self.held_at, self.report = time.monotonic(), report
        self.pids.append(proc.pid)
        while not self._go.wait(0.1):
            if self._cancel.is_set() or proc.poll() is not None:
                return ""
        return GO + "\n"

    @property
    def talks(self) -> bool:
        """Whether the side's stdin stays open after its hand-over (a dialogue)."""
        return isinstance(self.target, Dialogue)

    def line(self, proc) -> str:
        if isinstance(self.target, (AfterImport, Dialogue)):
            return self.target.line(proc)
        return handover_line(self.target)

    def heard(self, proc, msg: dict) -> str | None:
        return self.target.heard(proc, msg) if isinstance(self.target, Dialogue) else None


def began(t0: float, hidden) -> float | None:
    """When a side's work began, for its limit and its wall: its process's start ``t0``, or a
    held side's go (None while it is held)."""
    return hidden.went_at if isinstance(hidden, Hold) else t0
