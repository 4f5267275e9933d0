"""Shared checks for kernel tests: poison the outputs, call the kernel, compare with the
protected reference by relative RMS and max ulp, and insist every output was written; and
``to_device``, which moves inputs built on the CPU (seeded generators) to the test's device."""
from __future__ import annotations

import torch

from gates.side.numerics import bitwise_equal, compare, poison, unwritten
from kernels.k31 import contracts
from kernels.k31.config import Dims, Layout, Shapes

AWKWARD_ROWS = (1, 3, 17)


def to_device(device, *trees):
    """``trees`` (tensors, or dicts / tuples / lists holding them among other values) with every
    tensor on ``device``, returned in order (a single tree comes back bare).

    Views stay views: tensors that share a storage share one moved storage, with their sizes,
    strides and offsets, so a strided slice of a fused projection (and the parent buffer a test
    checks for writes) keeps its meaning on the GPU. On the tensors' own device nothing is
    copied."""
    device = torch.device(device)
    moved: dict[int, torch.UntypedStorage] = {}

    def move(x):
        if isinstance(x, torch.Tensor):
            if x.device == device:
                return x
            st = x.untyped_storage()
            key = st.data_ptr()
            if key not in moved:  # the whole storage, as bytes
                flat = torch.empty(0, dtype=torch.uint8, device=x.device)
                flat.set_(st, 0, (st.nbytes(),), (1,))
                moved[key] = flat.to(device).untyped_storage()
            return torch.empty(0, dtype=x.dtype, device=device).set_(
                moved[key], x.storage_offset(), x.size(), x.stride())
        if isinstance(x, dict):
            return {k: move(v) for k, v in x.items()}
        if isinstance(x, (tuple, list)):
            return type(x)(move(v) for v in x)
        return x

    out = tuple(move(t) for t in trees)
    return out[0] if len(out) == 1 else out


def shapes(model: str = "small", layout: str = "unsharded") -> Shapes:
    return Shapes(Dims.named(model), Layout.named(layout))


def run_and_compare(op_name: str, sh: Shapes, args: dict, *, rel_rms: float, max_ulp: float | None = None,
                    exact: tuple[str, ...] = ()) -> dict:
    """Run ``op_name``'s kernel on clones of ``args`` (outputs poisoned first) and its reference
    on the originals; assert every output and state write is within tolerance.

    ``exact`` names outputs that must match bit for bit (indices, counts). Returns the
    per-tensor :class:`~gates.side.numerics.Diff` for reporting.
    """
    spec = contracts.op(op_name)
    ref_args = {k: v for k, v in args.items() if k not in spec.outputs}
    expected = spec.reference(sh, **{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                     for k, v in ref_args.items()})
    run_args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
    for name in spec.outputs:
        poison(run_args[name])
    before = {k: run_args[k].clone() for k in spec.inputs if isinstance(run_args.get(k), torch.Tensor)}
    spec.load_kernel()(sh, **run_args)
    masks = spec.defined(sh, args) if spec.defined else {}
    diffs = {}
    for name in spec.outputs + spec.state:
        got = run_args[name]
        want = expected[name]
        mask = masks.get(name)
        if name in spec.outputs:
            sel = got if mask is None else got[mask]
            assert unwritten(sel) == 0, f"{op_name}: output {name} has {unwritten(sel)} unwritten elements"
        d = compare(want, got, mask)
        diffs[name] = d
        assert d.nan == 0 and d.inf == 0, f"{op_name}: {name} has NaN/Inf: {d}"
        if name in exact:
            assert d.differing == 0, f"{op_name}: {name} must match exactly: {d}"
        else:
            assert d.rel_rms <= rel_rms, f"{op_name}: {name} rel RMS {d.rel_rms:.3g} > {rel_rms}: {d}"
            if max_ulp is not None:
                assert d.max_ulp <= max_ulp, f"{op_name}: {name} max ulp {d.max_ulp} > {max_ulp}: {d}"
    for k, v in before.items():
        assert bitwise_equal(v, run_args[k]), f"{op_name}: kernel wrote its input {k}"
    return diffs
