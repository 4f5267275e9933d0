"""How the step calls an op. Protected: the gates observe and steer every op call through it.

``Ops(sh, mode)`` resolves each op name of ``contracts.py`` to the tree's kernel
(``mode="kernel"``) or the protected reference (``mode="reference"``: the eager baseline).
``ops(name, site, **args)`` runs it. A ``hook`` (set by a gate, never by the tree) wraps every
call as ``hook(spec, site, args, run)``; the hook decides whether and when ``run()`` executes,
so a tap can poison outputs before it, record after it, substitute recorded inputs, time it,
or leave an op out for a leave-one-out profile. With no hook the call is direct.
"""
from __future__ import annotations

from typing import Callable

import torch

from . import contracts
from .config import Shapes


class Ops:
    def __init__(self, sh: Shapes, mode: str = "kernel", hook: Callable | None = None):
        if mode not in ("kernel", "reference"):
            raise ValueError(f"ops: mode must be 'kernel' or 'reference', got {mode!r}")
        self.sh, self.mode, self.hook = sh, mode, hook
        self._impl: dict[str, Callable] = {}

    def implementation(self, name: str) -> Callable:
        if name not in self._impl:
            spec = contracts.op(name)
            self._impl[name] = spec.load_kernel() if self.mode == "kernel" else as_kernel(spec)
        return self._impl[name]

    def __call__(self, name: str, site: str, **args) -> None:
        impl = self.implementation(name)
        if self.hook is None:
            impl(self.sh, **args)
            return
        self.hook(contracts.op(name), site, args, lambda: impl(self.sh, **args))


def as_kernel(spec: contracts.OpSpec, **extra) -> Callable:
    """Wrap a reference (returns new values) into the kernel convention (writes in place).
    ``extra``: keywords the reference takes beyond the op's contract (the gates' caches)."""

    def run(sh, **args):
        result = spec.reference(sh, **{k: v for k, v in args.items() if k not in spec.outputs}, **extra)
        for name in spec.outputs + spec.state:
            dst, src = args[name], result[name]
            if isinstance(dst, torch.Tensor) and src is not dst:
                dst.copy_(src)

    run.__name__ = f"reference_{spec.name.replace('.', '_')}"
    return run
