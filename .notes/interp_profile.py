import torch,time,sys
from kernels.k31.config import *
from kernels.k31.model import build_model
from kernels.k31.step import DecodeStep
from kernels.k31.dispatch import Ops
from kernels.k31.workload import Workload
from gates.profile import OpClock
rows=int(sys.argv[1])
wl=Workload(1024, rows, 96, 3, 0)
m=build_model(Dims.small(), Layout.named('tp2'), rows=rows, max_position=wl.max_position, device='cpu')
c=OpClock(m.shapes, torch.device('cpu'), costs=False)
s=DecodeStep(m, rows, Ops(m.shapes, 'kernel', c))
tok,pos=wl.step_inputs(0,'cpu'); s.tokens.copy_(tok); s.pos.copy_(pos)
s.run(); c.calls.clear(); t=time.time(); s.run(); print('total', time.time()-t)
for k,v in sorted(c.table().items(), key=lambda kv:-kv[1]['ms']): print(f"{k:30s} {v['ms']:9.1f} ms {v['calls']}")
