"""The whole small decode step: Triton kernels against the reference ops from the same state,
and two runs from the same state bit-identical (CPU interpreter; the same test on a GPU)."""
import torch

from kernels.k31.config import Dims, Layout
from kernels.k31.dispatch import Ops
from kernels.k31.model import build_model
from kernels.k31.step import DecodeStep
from kernels.k31.workload import Workload


def _run(model, rows, mode, wl, steps=2):
    snap = model.state.snapshot()
    step = DecodeStep(model, rows, Ops(model.shapes, mode))
    logits = []
    for s in range(steps):
        tok, pos = wl.step_inputs(s, model.device)
        step.tokens.copy_(tok[:rows])
        step.pos.copy_(pos[:rows])
        step.logits.fill_(float("nan"))
        step.run()
        logits.append((step.logits.clone(), step.next_token.clone(), step.routing.clone()))
    after = {k: t.clone() for k, t in model.state.tensors()}
    model.state.restore(snap)
    return logits, after


def test_small_step_matches_the_reference_and_repeats_bit_for_bit(device):
    rows = 5
    dims = Dims.small()
    wl = Workload(dims.vocab, rows, 70, 4, seed=11)  # 35 tokens per rank: not a page multiple
    model = build_model(dims, Layout.named("tp2"), rows=rows, max_position=wl.max_position,
                        seed=3, weight_sets=2, device=device)
    kern, state_k = _run(model, rows, "kernel", wl)
    again, state_again = _run(model, rows, "kernel", wl)
    ref, _ = _run(model, rows, "reference", wl)
    for (lk, tk, rk), (la, ta, ra) in zip(kern, again):
        assert torch.equal(lk, la) and torch.equal(tk, ta) and torch.equal(rk, ra)
    for k in state_k:
        a, b = state_k[k], state_again[k]
        assert torch.equal(a.view(torch.uint8) if a.dtype.itemsize == 1 else a,
                           b.view(torch.uint8) if b.dtype.itemsize == 1 else b), k
    for (lk, tk, _), (lr, tr, _) in zip(kern, ref):
        assert torch.isfinite(lk).all()
        rel = float((lk.double() - lr.double()).norm() / lr.double().norm())
        assert rel < 1e-2, rel  # bf16 landing points, 5 layers: measured ~1e-7 on the CPU
        assert torch.equal(tk, tr)
