"""kern profile's table on the small model: every op row timed, costed and left out once.

Leaving an op out must not feed later kernels uninitialised buffers (a router left out of a
fresh step used to hand the experts garbage ids)."""
import pytest

from gates.side.driver import profile
from gates.side.session import Side, Spec

# slow: run serially after the unit tests (.ci/run), so the A/B timings of the bench and
# loop tests never share the two cores with other interpreter processes
pytestmark = pytest.mark.slow


def test_every_op_row_has_time_cost_and_a_leave_one_out_column(device):
    side = Side(Spec(model="small", layout="tp2", seed=0, weight_sets=2, context=64, steps=2,
                     rows=[2]), device)
    table = profile(side, 2, bandwidth=None, leave_one_out=True)
    ops = table["ops"]
    assert {"moe.experts", "moe.router", "residual.mix", "kda.core", "mla.topk",
            "dense projections (cuBLAS)"} <= set(ops)
    for name, row in ops.items():
        assert row["ms"] > 0 and row["calls"] > 0 and row["bytes"] > 0, name
        assert "free_ms" in row and row["modules"], name
    assert table["step_ms"] > 0
