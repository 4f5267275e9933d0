"""What the accuracy gate's tap hook costs per op call: launches counted, one pass timed.

    TRITON_INTERPRET=1 PYTHONPATH=. python bench/tools/tap_cost.py [--rows 1 3] [--steps 1]
        [--triton] [--json OUT]

Runs ``gates.side.tap.free_pass`` on the small model (``tp2``, context 80, as the cpu profile's
tap) and, through a ``TorchDispatchMode`` and a wrapper of Triton's launcher, counts what each
part of the pass dispatches:

* ``op``: inside the op's own ``run()`` (the tree's kernels: the same with or without a tap);
* ``hook``: inside the tap's hook around it (poison, checks, digests, kept copies);
* ``step``: the rest of the pass (the step's glue, the per-step ``settle``).

A launch is an aten op that is not a view or an allocation (on a GPU each is one kernel or
more), or one Triton kernel launch. ``--triton`` sends the tap's checks through the Triton kernel (run here by the interpreter),
the path a GPU takes; without it the CPU's plain torch path is counted. The pass is then
timed ``--repeat`` times without counting, alternating with the same pass under a hook that
only runs the op (the fastest of each is reported), and ``hook_own_s`` is the hook's own time
in its pass (each call less the op's run, plus the per-step settle): the interpreter's kernels
dominate a pass here and vary with the machine's load. CPU times are mechanics only: they say
nothing of the GPU's.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_FREE = {"empty.memory_format", "empty_strided.default", "empty_like.default", "detach.default",
         "lift_fresh.default", "alias.default"}


class Counter(TorchDispatchMode):
    """Launch-like aten ops per phase; Triton launches are added by :func:`count_triton`."""

    def __init__(self):
        super().__init__()
        self.phase = "step"
        self.triton_depth = 0
        self.launches = collections.Counter()
        self.ops = collections.Counter()

    @contextlib.contextmanager
    def within(self, phase: str):
        before, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = before

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.triton_depth:  # the interpreter's own tensor handling inside a launch
            return out
        name = f"{func._opname}.{func._overloadname}"
        if not func.is_view and name not in _FREE:
            self.launches[self.phase] += 1
            self.ops[(self.phase, name)] += 1
        return out


@contextlib.contextmanager
def count_triton(counter: Counter):
    """Count every Triton launch (compiled or interpreted) into ``counter``'s phase."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    saved = {cls: cls.run for cls in (InterpretedFunction, JITFunction)}

    def wrap(cls):
        inner = saved[cls]

        def run(self, *a, **k):
            if counter.triton_depth == 0:
                counter.launches[counter.phase] += 1
                counter.ops[(counter.phase, f"triton:{getattr(self, '__name__', '?')}")] += 1
            counter.triton_depth += 1
            try:
                return inner(self, *a, **k)
            finally:
                counter.triton_depth -= 1
        return run

    for cls in saved:
        cls.run = wrap(cls)
    try:
        yield
    finally:
        for cls, fn in saved.items():
            cls.run = fn


def measure(rows: list[int], steps: int, use_triton: bool, repeat: int = 3) -> dict:
    from gates.side import fingerprint, tap
    from gates.side.session import Side, Spec

    side = Side(Spec(model="small", layout="tp2", seed=0, weight_sets=1, context=80, steps=steps,
                     rows=[max(rows)]), "cpu")
    snap = side.model.state.snapshot()
    if use_triton:
        fingerprint.TRITON_ON_CPU = True
    counter = Counter()

    class CountedHook(tap.TapHook):
        def __call__(self, spec, site, args, run):
            def counted_run():
                with counter.within("op"):
                    run()
            with counter.within("hook"):
                super().__call__(spec, site, args, counted_run)

    plain = tap.TapHook
    tap.TapHook = CountedHook
    try:
        with count_triton(counter), counter:
            out = tap.free_pass(side, rows, steps, snap, set(), 0, {})
    finally:
        tap.TapHook = plain
    calls = sum(len(r["calls"]) for r in out["runs"].values())

    clock = {"hook": 0.0}

    class TimedHook(tap.TapHook):
        """The hook's own time: its call less the op's, and its per-step settle."""

        def __call__(self, spec, site, args, run):
            t0, inner = time.perf_counter(), [0.0]

            def timed_run():
                t = time.perf_counter()
                run()
                inner[0] += time.perf_counter() - t
            super().__call__(spec, site, args, timed_run)
            clock["hook"] += time.perf_counter() - t0 - inner[0]

        def settle(self):
            t0 = time.perf_counter()
            super().settle()
            clock["hook"] += time.perf_counter() - t0

    hooked_s, bare_s, hook_s = [], [], []
    for _ in range(repeat):
        clock["hook"] = 0.0
        tap.TapHook = TimedHook
        try:
            t0 = time.perf_counter()
            tap.free_pass(side, rows, steps, snap, set(), 0, {})
            hooked_s.append(time.perf_counter() - t0)
        finally:
            tap.TapHook = plain
        hook_s.append(clock["hook"])
        t0 = time.perf_counter()
        for r in rows:
            side.model.state.restore(snap)
            step = side.step(r, hook=lambda spec, site, args, run: run())
            for s in range(steps):
                side.set_inputs(step, s)
                step.run()
        bare_s.append(time.perf_counter() - t0)
    side.model.state.restore(snap)
    per_call = {k: round(v / calls, 2) for k, v in counter.launches.items()}
    top = collections.Counter({f"{p} {n}": c for (p, n), c in counter.ops.items() if p == "hook"})
    return {"rows": rows, "steps": steps, "checks": "triton" if use_triton else "torch",
            "op_calls": calls, "launches": dict(counter.launches), "launches_per_call": per_call,
            "hook_ops_top": dict(top.most_common(12)),
            "hooked_pass_s": round(min(hooked_s), 3), "bare_pass_s": round(min(bare_s), 3),
            "hook_own_s": round(min(hook_s), 3)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--triton", action="store_true", help="the tap's checks as the GPU runs them")
    ap.add_argument("--repeat", type=int, default=3, help="timed passes of each kind")
    ap.add_argument("--json", help="also write the result here")
    a = ap.parse_args(argv)
    res = measure(a.rows, a.steps, a.triton, a.repeat)
    text = json.dumps(res, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
