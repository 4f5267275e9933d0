"""Buffers and tables that a launcher makes once and then reuses on every call.

Why: the step must be CUDA-graph capturable, so no launcher may allocate on its hot path. The
step always runs once eagerly before capture; a launcher that needs scratch space (split
partials, intermediate activations, grouping tables) or a constant table (RoPE frequencies)
asks here and gets back the object made on that first call for the same key.

Keys start with the owner (the kernel or launcher that uses the object), so two ops never share
a buffer; the rest of the key is everything the object's contents or shape depend on (device,
sizes, dtype). Objects live for the process: shapes are fixed per step, so there are few.
"""
from __future__ import annotations

from typing import Callable, TypeVar

import torch


T = TypeVar("T")
_MADE: dict[tuple, object] = {}


def cached(key: tuple, make: Callable[[], T]) -> T:
    """The object made for ``key``: ``make()`` on the first call with that key, then the same one."""
    value = _MADE.get(key)
    if value is None:
        value = _MADE[key] = make()
    return value


def empty(owner: str, device, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized ``shape`` tensor of ``dtype`` on ``device``, one per (owner, device,
    shape, dtype); its contents are whatever the owner's last call left there."""
    shape = tuple(int(n) for n in shape)
    return cached((owner, str(device), shape, dtype),
                  lambda: torch.empty(shape, dtype=dtype, device=device))
