"""Where one step spends its time, per op, attributed by the op the dispatcher ran (and so
by the module that launched it), never by kernel name.

* ``OpClock``: a dispatcher hook that puts device events around every op call and computes
  each call's roofline cost (bytes, FLOPs) from its arguments.
* ``Omit``: a hook that leaves one op out, for the leave-one-out 'free' column (the step
  re-captured without it), because per-call events inflate small ops.
* ``Collectives``: the step's cross-rank operations (``kernels/k31/collectives.py``; they run
  outside the dispatcher) routed through the same clock or omission, so a multi-rank profile
  lists each as its own row of the ``collectives`` family.
"""
from __future__ import annotations

import time
from collections import defaultdict

import torch

from .timing import EVENT

DENSE = "dense projections (cuBLAS)"
COLLECTIVES = ("all_reduce", "gather_heads", "merge_attention", "select_topk", "argmax")
COLLECTIVES_MODULE = "kernels.k31.collectives"


def collective_row(name: str) -> str:
    return f"collectives.{name}"


def row_of(spec) -> str:
    """The profile row an op belongs to: dense projections are one row, as published."""
    return DENSE if spec.family == "dense" else spec.name


class OpClock:
    def __init__(self, sh, device: torch.device, costs: bool = True):
        self.sh, self.device, self.costs = sh, device, costs
        self.calls = []  # (row, spec, site, start, end, cost)

    def __call__(self, spec, site, args, run):
        s, e = self._timed(run)
        cost = spec.load_roofline()(self.sh, args) if self.costs else None
        self.calls.append((row_of(spec), spec, site, s, e, cost))

    def collective(self, name: str, run) -> None:
        """A cross-rank operation: timed like an op (its wait for the slowest peer included,
        as in the step); no roofline (it moves data between GPUs, not through HBM alone)."""
        s, e = self._timed(run)
        self.calls.append((collective_row(name), None, name, s, e, None))

    def _timed(self, run):
        if self.device.type == "cuda":
            s, e = EVENT(enable_timing=True), EVENT(enable_timing=True)
            s.record()
            run()
            e.record()
        else:
            s = time.perf_counter()
            run()
            e = time.perf_counter()
        return s, e

    def table(self) -> dict:
        """Per row: ms, calls, bytes, flops, and the modules that launched it."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        out: dict = defaultdict(lambda: {"ms": 0.0, "calls": 0, "bytes": 0.0, "flops": 0.0,
                                         "modules": set()})
        for row, spec, _site, s, e, cost in self.calls:
            ms = s.elapsed_time(e) if self.device.type == "cuda" else (e - s) * 1e3
            r = out[row]
            r["ms"] += ms
            r["calls"] += 1
            if cost is not None:
                r["bytes"] += cost.bytes
                r["flops"] += cost.flops
            r["modules"].add(spec.kernel.split(":")[0] if spec else COLLECTIVES_MODULE)
        return {k: {**v, "modules": sorted(v["modules"])} for k, v in out.items()}


class Omit:
    """Leave every op of profile row ``row`` out of the step once ``active``; its outputs keep
    what the last full run wrote. A fresh step's buffers are uninitialised, so run the step
    once with ``active`` False first: downstream kernels then read valid (stale) values, never
    garbage indices."""

    def __init__(self, row: str):
        self.row, self.active = row, False

    def __call__(self, spec, site, args, run):
        if not self.active or row_of(spec) != self.row:
            run()

    def collective(self, name: str, run) -> None:
        # every rank profiles the same rows in the same order, so all leave it out together
        if not self.active or collective_row(name) != self.row:
            run()


class Collectives:
    """The step's ``comm`` with each cross-rank operation run through ``around.collective(name,
    run)`` (an ``OpClock`` or an ``Omit``); anything else is the wrapped object's."""

    def __init__(self, comm, around):
        self.comm, self.around, self.world = comm, around, comm.world

    def __getattr__(self, name):  # gather_shares and whatever else reports use
        return getattr(self.comm, name)


def _routed(name: str):
    def call(self, *args) -> None:
        self.around.collective(name, lambda: getattr(self.comm, name)(*args))

    call.__name__ = name
    return call


for _name in COLLECTIVES:
    setattr(Collectives, _name, _routed(_name))
