"""The read-ceiling probe's kernel reads every value once, whatever the launch shape: its
partial sums add up to the tensor's sum (on the CPU through the interpreter; the GPU measures
its speed, gates/side/ceiling.py)."""
from __future__ import annotations

import pytest
import torch

from gates.side import ceiling


@pytest.mark.parametrize("shape", ceiling.SHAPES, ids=lambda s: s.label())
@pytest.mark.parametrize("n, programs", [(1, 3), (40_961, 5), (123_457, 2)])
def test_stream_sum_reads_every_value_once(shape, n, programs):
    g = torch.Generator().manual_seed(n * 31 + programs)
    x = torch.rand(n, generator=g, dtype=torch.float32) + 0.5  # no zeros: an unread value shows
    part = torch.full((programs,), float("nan"))
    part = ceiling.stream_sum(x, shape, programs)
    assert not torch.isnan(part).any()  # every program wrote its partial
    want = x.double().sum().item()
    assert abs(part.double().sum().item() - want) <= 1e-5 * want


def test_stream_sum_refuses_what_it_cannot_read_as_f32():
    with pytest.raises(ValueError, match="expected a contiguous f32 tensor"):
        ceiling.stream_sum(torch.ones(8, dtype=torch.bfloat16), ceiling.SHAPES[0], 1)


def test_no_ceiling_on_the_cpu():
    assert ceiling.read_ceiling(torch.device("cpu")) is None
