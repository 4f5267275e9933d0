"""Per-kernel launch census under the interpreter: grid, programs, time, nested jit calls.
Run: TRITON_INTERPRET=1 PYTHONPATH=. python .notes/interp_launches.py ROWS"""
import sys, time, collections, runpy
import triton.runtime.interpreter as I
stats = collections.defaultdict(lambda: [0, 0, 0.0, 0, set()])  # launches, programs, s, nested, grids
_call, _nested = I.GridExecutor.__call__, I.InterpretedFunction.__call__
cur = [None]
def call(self, *a, **k):
    g = self.grid
    name = self.fn.__name__
    cur[0] = name
    t = time.perf_counter(); r = _call(self, *a, **k); dt = time.perf_counter() - t
    s = stats[name]; s[0] += 1; s[2] += dt
    s[4].add(tuple(g) if not callable(g) else 'fn')
    return r
def nested(self, *a, **k):
    stats[cur[0]][3] += 1
    return _nested(self, *a, **k)
I.GridExecutor.__call__ = call
I.InterpretedFunction.__call__ = nested
orig_run = I.InterpretedFunction.run
def run(self, *a, grid, warmup, **k):
    if not warmup:
        g = grid if not callable(grid) else None
        if g is not None:
            n = 1
            for x in g: n *= x
            stats[self.fn.__name__][1] += n
    return orig_run(self, *a, grid=grid, warmup=warmup, **k)
I.InterpretedFunction.run = run
sys.argv = ['x', sys.argv[1]]
runpy.run_path('.notes/interp_profile.py', run_name='__main__')
print(f"{'kernel':24s} {'launch':>6s} {'progs':>6s} {'s':>7s} {'nested':>7s} grids (both runs)")
for k, v in sorted(stats.items(), key=lambda kv: -kv[1][2]):
    print(f"{k:24s} {v[0]:6d} {v[1]:6d} {v[2]:7.2f} {v[3]:7d} {sorted(map(str, v[4]))[:4]}")
