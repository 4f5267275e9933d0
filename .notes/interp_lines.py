"""Per-line time of Triton kernels under the interpreter, for one op of the small step.
Run: TRITON_INTERPRET=1 PYTHONPATH=. python .notes/interp_lines.py ROWS OP [TOP]"""
import sys, time, collections
import torch
from kernels.k31.config import Dims, Layout
from kernels.k31.model import build_model
from kernels.k31.step import DecodeStep
from kernels.k31.dispatch import Ops
from kernels.k31.workload import Workload

rows, target = int(sys.argv[1]), sys.argv[2]
top = int(sys.argv[3]) if len(sys.argv) > 3 else 30
wl = Workload(1024, rows, 96, 3, 0)
m = build_model(Dims.small(), Layout.named('tp2'), rows=rows, max_position=wl.max_position, device='cpu')
calls = []


def hook(spec, site, args, run):
    if spec.name == target:
        calls.append(run)
    run()


s = DecodeStep(m, rows, Ops(m.shapes, 'kernel', hook))
tok, pos = wl.step_inputs(0, 'cpu')
s.tokens.copy_(tok)
s.pos.copy_(pos)
s.run()
run = calls[0]
run()
cost = collections.Counter()
last = {}


def tracer(frame, event, arg):
    f = frame.f_code.co_filename
    if '/kernels/k31/' not in f:
        return None
    key = id(frame)

    def local(frame, event, arg):
        now = time.perf_counter()
        if key in last:
            cost[last[key][0]] += now - last[key][1]
        if event == 'line':
            last[key] = ((f.split('/kernels/k31/')[1], frame.f_lineno), time.perf_counter())
        elif event == 'return':
            last.pop(key, None)
        return local
    return local


t = time.perf_counter()
run()
print('one call ms (untraced)', (time.perf_counter() - t) * 1e3)
sys.settrace(tracer)
run()
sys.settrace(None)
lines = {}
for (f, n), c in cost.most_common(top):
    src = open('kernels/k31/' + f).read().splitlines()[n - 1].strip()
    print(f"{c * 1e3:8.2f} ms  {f}:{n:<4d} {src[:90]}")
