"""Content digests: the GPU path's Triton kernel (run here by the interpreter) against a numpy
statement of the same function, and the properties the tap relies on for both paths."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gates.side import fingerprint as F
from gates.side.numerics import INT_POISON

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




# ------------------------------------------------------------------ the tap's fused check
KEY = F.digest_key(11)
DTYPES = [torch.bfloat16, torch.float32, torch.float16, torch.float64, torch.float8_e4m3fn,
          torch.float8_e5m2, torch.int32, torch.int64, torch.int16, torch.uint8, torch.bool]


def _random(dtype, rows, cols, seed):
    size = torch.empty((), dtype=dtype).element_size()
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (rows * cols * size,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        raw &= 1  # a bool's byte is 0 or 1
    return raw.view(dtype).reshape(rows, cols)


def _slot(path, t, rows=None, counts=True, values=True, key=KEY, programs=2):
    """The check's slot (lanes reduced mod P31), by the Triton kernel (here the interpreter;
    ``programs`` small so each program loops over several blocks) or the torch path."""
    kind = F._Kind.of(t.dtype, counts, values)
    if path == "triton":
        out = torch.zeros(F._SLOT, dtype=torch.int64)
        if t.numel():
            F._check_triton(t, rows, kind, torch.tensor(key), out, programs=programs)
    else:
        out = F._check_torch(t, rows, kind, F._Coefficients(key, "cpu"))
    v = out.tolist()
    return [x % F.P31 for x in v[:4]] + v[4:6]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("masked", [False, True])
def test_fused_check_kernel_is_the_torch_paths_function(dtype, masked):
    # 5 x 1000 elements: 3 blocks of the kernel, looped over by 2 programs
    t = _random(dtype, 5, 1000, seed=DTYPES.index(dtype))
    rows = torch.tensor([True, False, True, True, False]) if masked else None
    for counts, values in [(True, True), (False, False)]:
        assert _slot("triton", t, rows, counts, values) == _slot("torch", t, rows, counts, values)


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_fused_check_sees_every_change_move_and_defect(path):
    t = torch.randn(6, 40, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    base = _slot(path, t)
    assert base == _slot(path, t.clone()) and base[4:] == [0, 0]
    flipped = t.clone()
    flipped.view(torch.int16)[2, 5] ^= 1  # one low mantissa bit
    assert _slot(path, flipped)[:4] != base[:4]
    swapped = t.clone()
    swapped[0, 0], swapped[5, 39] = t[5, 39], t[0, 0]
    assert _slot(path, swapped)[:4] != base[:4]
    assert _slot(path, t.roll(1, 0))[:4] != base[:4]  # rows moved
    assert _slot(path, t, key=F.digest_key(12))[:4] != base[:4]  # another judgment's key
    zeros = torch.zeros(9, 2)
    raw, neg = _slot(path, zeros), _slot(path, -zeros)
    assert raw[:2] != neg[:2] and raw[2:4] == neg[2:4]  # raw sees -0; the values do not
    bad = t.clone()
    bad[1, 3], bad[4, 0], bad[4, 1] = float("nan"), float("inf"), -float("inf")
    assert _slot(path, bad)[4:] == [1, 2]
    rows = torch.tensor([True, True, True, True, False, True])
    assert _slot(path, bad, rows)[4:] == [1, 0]  # row 4 is not defined: not counted
    elsewhere = t.clone()
    elsewhere[4] = float("nan")  # an undefined row hashes as zeros, whatever it holds
    assert _slot(path, elsewhere, rows)[:4] == _slot(path, t, rows)[:4] \
        == _slot(path, torch.where(rows[:, None], t, 0))[:4]
    ints = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    ints[1, 2] = INT_POISON
    assert _slot(path, ints)[4:] == [1, 0]
    assert _slot(path, ints.long())[4:] == [1, 0]
    fp8 = torch.zeros(4, dtype=torch.float8_e4m3fn)
    fp8.view(torch.uint8)[1] = 0x7F  # poison() fills fp8 so
    assert _slot(path, fp8)[4:] == [1, 0]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.data())
def test_fused_check_changes_with_any_one_element(numel, data):
    """Property (torch path): rewriting any one element of a tensor with any other bits
    changes both lanes of the raw hash."""
    dtype = data.draw(st.sampled_from([torch.bfloat16, torch.float32, torch.int64, torch.uint8]))
    t = _random(dtype, 1, numel, seed=numel).reshape(-1)
    i = data.draw(st.integers(0, numel - 1))
    bits = t.view(F._INT_OF[t.element_size()])
    new = data.draw(st.integers(-(1 << (8 * t.element_size() - 1)), (1 << (8 * t.element_size() - 1)) - 1))
    assume(new != int(bits[i]))
    other = t.clone()
    other.view(F._INT_OF[t.element_size()])[i] = new
    a, b = _slot("torch", t), _slot("torch", other)
    assert a[0] != b[0] and a[1] != b[1]


def test_a_collision_built_for_one_key_fails_under_another():
    """Why the key: the lanes are linear in the chunks, so code that knows the coefficients can
    pick two chunk changes that cancel in a lane (here lane 0, by meet in the middle). Built
    for one key, they do not cancel under the next judgment's."""
    key = F.digest_key(1)
    c = F._Coefficients(key, "cpu")(2)[0].tolist()
    d = np.arange(1, 1 << 16, dtype=np.int64)
    left = {int(v): int(x) for v, x in zip((c[0] * d) % F.P31, d)}
    right = (-(c[1] * d)) % F.P31
    j = next(k for k, v in enumerate(right.tolist()) if v in left)
    d0, d1 = left[int(right[j])], int(d[j])  # c0 * d0 + c1 * d1 = 0 mod P31
    base = torch.tensor([0, 0], dtype=torch.int16)
    forged = torch.tensor([d0, d1], dtype=torch.int32).to(torch.int16)  # chunk values d0, d1
    assert _slot("torch", base, key=key)[0] == _slot("torch", forged, key=key)[0]
    assert _slot("torch", base, key=F.digest_key(2))[0] != _slot("torch", forged, key=F.digest_key(2))[0]


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_pending_checks_read_back_in_order_across_buffer_chunks(path, monkeypatch):
    monkeypatch.setattr(F, "_CHUNK_SLOTS", 3)
    monkeypatch.setattr(F, "TRITON_ON_CPU", path == "triton")
    p = F.Pending("cpu", KEY)
    ts = [torch.full((2, 3), float(i)) for i in range(7)] + [torch.empty(0, 4)]
    ts[5][1, 1] = float("nan")
    idx = [p.check(t) for t in ts]
    first = p.resolve()
    assert [first[i].unwritten for i in idx] == [0] * 5 + [1, 0, 0]
    assert len({c.raw for c in first}) == 8 and first[0].raw.startswith("torch.float32(2, 3):")
    assert first[7].raw == "torch.float32(0, 4):" + "0" * 16
    again = [p.check(t) for t in ts]  # the buffers were cleared: the same checks again
    assert p.resolve() == first and again == idx
    assert p.now(ts[5]) == first[5]
    ints = torch.arange(4, dtype=torch.int32)
    p.check(ints)
    p.check(torch.tensor([-0.0, 1.0]))
    i32, f32 = p.resolve()
    assert i32.raw == i32.value and f32.raw != f32.value
    assert i32.nonfinite == 0


@pytest.mark.gpu
def test_pending_on_the_gpu_takes_the_tensors_of_the_device_it_was_named_with():
    """'cuda' (no index: what a side's spec says) and a tensor's 'cuda:0' are one device; the
    tap's checks must agree with the torch path there too."""
    p = F.Pending("cuda", KEY)
    t = torch.arange(1000, dtype=torch.float32, device="cuda").reshape(10, 100)
    i = p.check(t)
    on_gpu = p.resolve()[i]
    q = F.Pending("cpu", KEY)
    j = q.check(t.cpu())
    assert q.resolve()[j] == on_gpu
