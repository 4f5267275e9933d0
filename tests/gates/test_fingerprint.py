"""Content digests: the GPU path's Triton kernel (run here by the interpreter) against a numpy
statement of the same function, and the properties the tap relies on for both paths."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gates.side import fingerprint as F

M32 = 0xFFFFFFFF


def _mix(x: np.ndarray) -> np.ndarray:
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & M32
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & M32
    return x ^ (x >> 16)


def numpy_digest(t: torch.Tensor) -> list[int]:
    """The kernel's function, stated over uint64 arrays (products masked to 32 bits)."""
    b = t.contiguous().reshape(-1).view(torch.uint8).numpy()
    w = (b.view(np.uint32) if b.size % 4 == 0 else b).astype(np.uint64)
    idx = np.arange(w.size, dtype=np.uint64)
    a = _mix(w ^ _mix((idx ^ (idx >> 32)) & M32))
    bb = _mix(a ^ 0x5BD1E995 ^ ((idx >> 3) & M32))
    mask = (1 << 47) - 1
    return [int(a.sum(dtype=np.uint64)) & mask, int(bb.sum(dtype=np.uint64)) & mask]


@pytest.mark.parametrize("dtype,numel", [(torch.float32, 1), (torch.bfloat16, 3), (torch.int32, 4097),
                                         (torch.float8_e4m3fn, 17), (torch.uint8, 8191)])
def test_triton_digest_is_the_stated_function(dtype, numel):
    g = torch.Generator().manual_seed(numel)
    raw = torch.randint(0, 256, (numel * torch.empty((), dtype=dtype).element_size(),),
                        dtype=torch.uint8, generator=g)
    t = raw.view(dtype)
    assert F._digest_cuda(t).tolist() == numpy_digest(t)


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_digest_sees_every_change_and_move(path):
    digest = F._digest_cuda if path == "triton" else F.digest_on_device
    g = torch.Generator().manual_seed(7)
    t = torch.randn(5, 33, generator=g)
    base = digest(t).tolist()
    assert digest(t.clone()).tolist() == base
    flipped = t.clone()
    flipped.view(torch.int32)[2, 5] ^= 1  # one low mantissa bit
    assert digest(flipped).tolist() != base
    swapped = t.clone()
    swapped[0, 0], swapped[4, 32] = t[4, 32], t[0, 0]
    assert digest(swapped).tolist() != base
    signed = torch.zeros(9)
    assert digest(-signed).tolist() != digest(signed).tolist()  # raw: -0 is not +0
    assert digest(F.value_view(-signed)).tolist() == digest(signed).tolist()


def test_pending_shares_one_digest_where_value_is_raw():
    p = F.Pending()
    ints = torch.arange(10, dtype=torch.int32)
    raw, value = p.digests(ints)
    assert raw == value
    raw, value = p.digests(torch.tensor([-0.0, 1.0]))
    assert raw != value
    out = p.resolve()
    assert out[raw] != out[value] and len(out) == 3
