"""Timing one decode step: a CUDA graph of the whole step, replayed and timed with events.

The timed region is exactly one replay of the whole step's graph; between replays (outside
it) the inputs change to the next workload set. On the CPU the step runs eagerly and a host
clock times it (mechanics only, never a GPU score).
"""
from __future__ import annotations

import time
from typing import Callable

import torch

# bound when the gates load, before the candidate's tree does: a tree that binds another class
# to torch.cuda.Event (one whose events keep no time) does not change what times the replays;
# the tamper seal names it (gates/side/tamper.py)
EVENT = torch.cuda.Event


class Timer:
    """Times ``run`` (one step) ``n`` times, calling ``between(i)`` untimed before each."""

    def __init__(self, run: Callable[[], None], device: torch.device):
        self.run, self.device = run, device
        self.graph = None

    def capture(self, warmup: int = 2) -> None:
        if self.device.type != "cuda":
            return
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self.run()
        torch.cuda.current_stream(self.device).wait_stream(side)
        torch.cuda.synchronize(self.device)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self.run()
        torch.cuda.synchronize(self.device)
        self.graph = g

    def once(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.run()

    def measure(self, n: int, between: Callable[[int], None] | None = None) -> list[float]:
        """Milliseconds per call, one sample per call."""
        out = []
        if self.device.type == "cuda":
            starts = [EVENT(enable_timing=True) for _ in range(n)]
            ends = [EVENT(enable_timing=True) for _ in range(n)]
            for i in range(n):
                if between:
                    between(i)
                starts[i].record()
                self.once()
                ends[i].record()
            torch.cuda.synchronize(self.device)
            out = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        else:
            for i in range(n):
                if between:
                    between(i)
                t = time.perf_counter()
                self.once()
                out.append((time.perf_counter() - t) * 1e3)
        return out


class Spans:
    """Time of named untimed work between replays (device time on a GPU, from events, with no
    host sync per span; the host clock on the CPU), summed per name: what the scorer's own
    checks cost beside the replays they check."""

    def __init__(self, device: torch.device):
        self.device = device
        self._marks: dict = {}

    def span(self, name: str):
        return _Span(self, name)

    def totals_ms(self) -> dict:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return {k: sum(s.elapsed_time(e) for s, e in v) for k, v in self._marks.items()}
        return {k: sum(v) for k, v in self._marks.items()}


class _Span:
    def __init__(self, spans: Spans, name: str):
        self.spans, self.name = spans, name

    def __enter__(self):
        if self.spans.device.type == "cuda":
            self.start = EVENT(enable_timing=True)
            self.start.record()
        else:
            self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        marks = self.spans._marks.setdefault(self.name, [])
        if self.spans.device.type == "cuda":
            end = EVENT(enable_timing=True)
            end.record()
            marks.append((self.start, end))
        else:
            marks.append((time.perf_counter() - self.start) * 1e3)
        return False
