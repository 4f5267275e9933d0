"""Triton's CPU interpreter for a process without a GPU, chosen before triton is imported:
by the loop's process (``kern profile``/``kern try``/``kern loop``) and by each side's."""
from __future__ import annotations

import os


def prepare_interpreter() -> None:
    """Without a GPU the Triton kernels run in the interpreter; set before triton imports."""
    try:
        import torch

        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
    except ImportError:
        pass
