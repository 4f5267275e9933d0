"""The compile baseline's warm-up: timed steps start only once a whole step compiled nothing."""
from hypothesis import given, strategies as st

from gates.side.replays import warm_until_stable


@given(st.lists(st.integers(0, 5), min_size=1, max_size=12), st.integers(1, 10))
def test_warm_until_stable_stops_at_the_first_call_that_compiles_nothing(new_graphs, limit):
    # new_graphs[i]: graphs the i-th call compiles (calls past the list compile nothing)
    count, calls = [0], [0]

    def run():
        i = calls[0]
        calls[0] += 1
        count[0] += new_graphs[i] if i < len(new_graphs) else 0

    made = warm_until_stable(run, lambda: count[0], limit)
    first_quiet = next((i + 1 for i, g in enumerate(new_graphs) if g == 0), len(new_graphs) + 1)
    assert made == calls[0] == min(first_quiet, limit)


def test_a_step_that_always_compiles_is_run_limit_times():
    count = [0]

    def run():
        count[0] += 1

    assert warm_until_stable(run, lambda: count[0], 4) == 4
    assert count[0] == 4
