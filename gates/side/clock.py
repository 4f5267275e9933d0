"""Where a side's process spends its time, measured where the work runs: the spans of its
phases (build, tap, capture, save, wait) on this process's clock, with the time Triton spends
compiling taken out of whichever span it fell in and reported as its own phase.

Triton's compilation listener (``triton.knobs.compilation.listener``, in 3.6 and 3.9) is told
of every kernel it compiles or loads from its cache, with the seconds that took. Only a
measurement: nothing here changes what runs, and the candidate's code replacing the listener
changes no verdict, only this figure. The result is ``gates.protocol.SidePhases``.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

from ..protocol import SidePhases


class CompileClock:
    """Seconds Triton spent compiling or loading kernels in this process, and how many."""

    def __init__(self):
        self.seconds, self.compiled, self.loaded = 0.0, 0, 0
        self.installed = False

    def install(self) -> "CompileClock":
        """Listen to Triton's compiler (before any kernel compiles); a Triton without the
        listener (or the interpreter, which compiles nothing) leaves the clock at zero."""
        try:
            from triton import knobs
        except ImportError:
            return self
        comp = getattr(knobs, "compilation", None)
        if comp is not None and hasattr(comp, "listener"):
            comp.listener = self
            self.installed = True
        return self

    def __call__(self, *, src, metadata, metadata_group, times, cache_hit) -> None:
        self.seconds += times.total / 1e6  # microseconds
        if cache_hit:
            self.loaded += 1
        else:
            self.compiled += 1


class PhaseClock:
    """The spans of one side's phases; :meth:`phases` is what the side reports."""

    def __init__(self, compiler: CompileClock | None = None, start: float | None = None):
        self.compiler = compiler or CompileClock()
        self.start = time.monotonic() if start is None else start
        self.spans: dict[str, float] = {}

    @contextmanager
    def span(self, name: str):
        """Time the block as phase ``name``, less what Triton compiled meanwhile."""
        t0, c0 = time.monotonic(), self.compiler.seconds
        try:
            yield
        finally:
            self.add(name, time.monotonic() - t0 - (self.compiler.seconds - c0))

    def add(self, name: str, seconds: float) -> None:
        self.spans[name] = self.spans.get(name, 0.0) + max(0.0, seconds)

    def phases(self) -> SidePhases:
        c = self.compiler
        return SidePhases(driver_s=time.monotonic() - self.start,
                          compile_s=c.seconds if c.installed else None,
                          compiled=c.compiled, loaded=c.loaded,
                          **{f"{k}_s": v for k, v in self.spans.items()})


CLOCK: PhaseClock | None = None  # this process's (gates/side/driver.py starts it)


def clock() -> PhaseClock:
    """This process's phase clock (a fresh one where no driver started it: a test)."""
    global CLOCK
    if CLOCK is None:
        CLOCK = PhaseClock()
    return CLOCK
