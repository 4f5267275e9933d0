"""Every op of one step against the protected reference, on the step's own inputs and state.

A dispatcher hook (``kernels/k31/dispatch.py``): each call runs the tree's kernel, then the
reference on copies of the same inputs and state-before, and keeps the worst relative RMS,
max ulp and NaN/Inf count per op. ``kern step --ref-rows`` reports it; the scorer runs it in
its verify step, at the bench's own shapes and in the bench's own process, so a kernel that
does something else only when it is benched (or only at the bench's context) shows up as an
op far from the reference although the accuracy gate saw nothing.
"""
from __future__ import annotations

import torch

from .numerics import _is_big, compare, written_rows


class ReferenceCheck:
    """The hook; ``worst`` maps op name -> {rel_rms, max_ulp, nan, calls, at}.

    ``sample`` (op -> call indices within one step) checks only those calls of each named op,
    where the reference costs too much for all of them (ops not named: every call); the
    coordinator draws the indices afresh per run. ``calls_seen`` counts every call."""

    def __init__(self, shapes, sample: dict | None = None):
        self.shapes = shapes
        self.worst: dict = {}
        self.sample = {op: set(int(i) for i in idx) for op, idx in (sample or {}).items()}
        self.calls_seen: dict = {}

    def __call__(self, spec, site, args, run):
        from kernels.k31 import contracts

        index = self.calls_seen.get(spec.name, 0)
        self.calls_seen[spec.name] = index + 1
        if spec.name in self.sample and index not in self.sample[spec.name]:
            run()
            return
        sh = self.shapes
        ref_args = {k: (v.clone() if isinstance(v, torch.Tensor) and k in spec.state else v)
                    for k, v in args.items() if k not in spec.outputs}
        before = {k: args[k].clone() for k in spec.state if _is_big(args[k])}
        run()
        expected = contracts.op(spec.name).reference(sh, **ref_args)
        masks = spec.defined(sh, args) if spec.defined else {}
        w = self.worst.setdefault(spec.name, {"rel_rms": 0.0, "max_ulp": 0.0, "nan": 0, "calls": 0,
                                              "at": None})
        for name in spec.outputs + spec.state:
            got, want = args[name], expected[name]
            if name in before:  # a cache: compare the rows this call wrote, not tens of GB
                idx, rows_got = written_rows(before[name], got)
                got, want = rows_got, want.reshape(-1, want.shape[-1])[idx]
            d = compare(want, got, masks.get(name))
            w["nan"] += d.nan + d.inf
            if d.rel_rms > w["rel_rms"]:
                w["rel_rms"], w["at"] = d.rel_rms, f"{site}.{name}"
            w["max_ulp"] = max(w["max_ulp"], d.max_ulp)
        w["calls"] += 1

    def table(self) -> dict:
        """Worst first."""
        return dict(sorted(self.worst.items(), key=lambda kv: -kv[1]["rel_rms"]))
