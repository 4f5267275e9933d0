"""Where the small decode step spends its time under Triton's CPU interpreter (the CPU tests'
and the cpu profile's cost), three ways:

    TRITON_INTERPRET=1 PYTHONPATH=. python bench/tools/interp_profile.py ROWS
        wall time per op of one eager step (``gates.side.profile.OpClock``, no roofline);
    ... interp_profile.py ROWS --launches
        the same, plus per Triton kernel: launches, programs, seconds and nested @triton.jit
        calls, with the grids seen (both runs);
    ... interp_profile.py ROWS --lines OP [--top N]
        per source line of the tree, the time of one call of OP (``sys.settrace``).

The small model (``Dims.small()``) on the ``tp2`` layout, context 96, as the kernel helpers
measured it on 2026-11-29 (17 rows: 9.97 s -> 3.37 s per step after their changes; 1 row
~1.3 s). What the interpreter (triton 3.9) was found to pay for:

* ~60 us per ``tl`` op whatever the block size (numpy on the whole block), ~0.4 ms per launch,
  ~5 us per extra program: few programs with large blocks, and vectorized rows, win;
* ~250-400 us per call of a @triton.jit function from a kernel, ``tl.sum`` / ``tl.max`` /
  ``tl.min`` / ``tl.cumsum`` included (each call re-patches ``tl``);
* int32 add / sub / mul carry an overflow check (~6 extra numpy ops; int64 is not checked);
* f32 -> bf16 casts cost ~80 ns per element.

``kernels/k31/platform.FEW_PROGRAMS`` (= ``INTERPRET``) is the launchers' switch to
interpreter-friendly launch shapes. Times are of this machine, never GPU scores.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time


def build(rows: int):
    import torch

    from gates.side.profile import OpClock
    from kernels.k31.config import Dims, Layout
    from kernels.k31.dispatch import Ops
    from kernels.k31.model import build_model
    from kernels.k31.step import DecodeStep
    from kernels.k31.workload import Workload

    dims = Dims.small()
    wl = Workload(dims.vocab, rows, 96, 3, 0)
    m = build_model(dims, Layout.named("tp2"), rows=rows, max_position=wl.position_bound,
                    device="cpu")
    tok, pos = wl.step_inputs(0, "cpu")

    def step(hook):
        s = DecodeStep(m, rows, Ops(m.shapes, "kernel", hook))
        s.tokens.copy_(tok)
        s.pos.copy_(pos)
        return s

    return m, step, lambda: OpClock(m.shapes, torch.device("cpu"), costs=False)


def per_op(rows: int) -> None:
    m, step, clock = build(rows)
    c = clock()
    s = step(c)
    s.run()  # the first run compiles nothing here, but fills every buffer
    c.calls.clear()
    t = time.perf_counter()
    s.run()
    print(f"rows {rows}: one step {time.perf_counter() - t:.2f} s")
    for k, v in sorted(c.table().items(), key=lambda kv: -kv[1]["ms"]):
        print(f"{k:30s} {v['ms']:9.1f} ms {v['calls']}")


def launches(rows: int) -> None:
    import triton.runtime.interpreter as I

    stats = collections.defaultdict(lambda: [0, 0, 0.0, 0, set()])  # launches, programs, s, nested, grids
    call0, nested0, run0 = I.GridExecutor.__call__, I.InterpretedFunction.__call__, I.InterpretedFunction.run
    cur = [None]

    def call(self, *a, **k):
        cur[0] = self.fn.__name__
        t = time.perf_counter()
        r = call0(self, *a, **k)
        s = stats[cur[0]]
        s[0] += 1
        s[2] += time.perf_counter() - t
        s[4].add(tuple(self.grid) if not callable(self.grid) else "fn")
        return r

    def nested(self, *a, **k):
        stats[cur[0]][3] += 1
        return nested0(self, *a, **k)

    def run(self, *a, grid, warmup, **k):
        if not warmup and not callable(grid):
            n = 1
            for x in grid:
                n *= x
            stats[self.fn.__name__][1] += n
        return run0(self, *a, grid=grid, warmup=warmup, **k)

    I.GridExecutor.__call__, I.InterpretedFunction.__call__, I.InterpretedFunction.run = call, nested, run
    per_op(rows)
    print(f"{'kernel':24s} {'launch':>6s} {'progs':>6s} {'s':>7s} {'nested':>7s} grids (both runs)")
    for k, v in sorted(stats.items(), key=lambda kv: -kv[1][2]):
        print(f"{k:24s} {v[0]:6d} {v[1]:6d} {v[2]:7.2f} {v[3]:7d} {sorted(map(str, v[4]))[:4]}")


def lines(rows: int, op: str, top: int) -> None:
    calls = []

    def hook(spec, site, args, run):
        if spec.name == op:
            calls.append(run)
        run()

    _, step, _ = build(rows)
    step(hook).run()
    if not calls:
        sys.exit(f"interp_profile: no call of {op!r} in the step (see `kern ops`)")
    one = calls[0]
    one()
    cost, last = collections.Counter(), {}

    def tracer(frame, event, arg):
        f = frame.f_code.co_filename
        if "/kernels/k31/" not in f:
            return None
        key = id(frame)

        def local(frame, event, arg):
            now = time.perf_counter()
            if key in last:
                cost[last[key][0]] += now - last[key][1]
            if event == "line":
                last[key] = ((f.split("/kernels/k31/")[1], frame.f_lineno), time.perf_counter())
            elif event == "return":
                last.pop(key, None)
            return local
        return local

    t = time.perf_counter()
    one()
    print(f"{op}: one call {(time.perf_counter() - t) * 1e3:.1f} ms (untraced)")
    sys.settrace(tracer)
    one()
    sys.settrace(None)
    for (f, n), c in cost.most_common(top):
        src = open("kernels/k31/" + f).read().splitlines()[n - 1].strip()
        print(f"{c * 1e3:8.2f} ms  {f}:{n:<4d} {src[:90]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/tools/interp_profile.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", type=int)
    ap.add_argument("--launches", action="store_true", help="per-kernel launch census")
    ap.add_argument("--lines", metavar="OP", default=None, help="per-line time of one call of OP")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    if args.lines:
        lines(args.rows, args.lines, args.top)
    elif args.launches:
        launches(args.rows)
    else:
        per_op(args.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
