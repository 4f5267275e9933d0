"""The gates' hidden inputs (gates/rules/hidden.py): what a judgment may draw, over any bucket list."""
from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gates.protocol import SEED_BOUND, Hidden, HiddenError
from gates.rules.hidden import candidates, draw

buckets = st.lists(st.integers(1, 300), min_size=1, max_size=6, unique=True)
rows = st.lists(st.integers(1, 300), max_size=10, unique=True)


@given(buckets, rows, st.integers(0, 4), st.integers(0, 2**64))
def test_extra_rows_are_awkward_distinct_and_as_many_as_qualify(bk, test_rows, count, seed):
    h = draw(random.Random(seed), bk, test_rows, count)
    pool = candidates(bk, test_rows)
    assert len(h.extra_rows) == min(count, len(pool))
    assert len(set(h.extra_rows)) == len(h.extra_rows)
    assert list(h.extra_rows) == sorted(h.extra_rows)
    for r in h.extra_rows:
        assert 1 <= r <= max(bk) and r not in bk and r not in test_rows
    assert 0 <= h.input_seed < SEED_BOUND


@given(buckets, rows, st.integers(0, 2**64))
def test_the_draw_is_pure_given_the_generator_and_round_trips(bk, test_rows, seed):
    a, b = draw(random.Random(seed), bk, test_rows), draw(random.Random(seed), bk, test_rows)
    assert a == b
    assert Hidden.from_dict(a.to_dict()) == a


def test_tiny_profiles_leave_fewer_or_no_extra_rows():
    # the cpu profile: buckets [2, 4], test rows 1, 3, 17, 8: every size 1..4 is taken
    assert candidates([2, 4], [1, 3, 17, 8]) == []
    h = draw(random.Random(0), [2, 4], [1, 3, 17, 8])
    assert h.extra_rows == () and "extra batch sizes none" in h.describe()
    # one size left: drawn alone
    assert draw(random.Random(0), [2, 4], [1, 3]).extra_rows == ()
    assert draw(random.Random(0), [2, 4], [1]).extra_rows == (3,)
    assert draw(random.Random(1), [8], [1, 3, 8, 17]).extra_rows[0] in (2, 4, 5, 6, 7)


def test_every_size_and_seed_is_reachable():
    """Over many draws every candidate size turns up (nothing is excluded silently)."""
    rng = random.Random(5)
    seen = {r for _ in range(400) for r in draw(rng, [8], [1, 3, 8, 17]).extra_rows}
    assert seen == {2, 4, 5, 6, 7}


@pytest.mark.parametrize("bad", [
    None, {}, {"input_seed": 1}, {"input_seed": -1, "extra_rows": []},
    {"input_seed": True, "extra_rows": []}, {"input_seed": 1, "extra_rows": [0]},
    {"input_seed": 1, "extra_rows": [3, 3]}, {"input_seed": 1, "extra_rows": "3"},
    {"input_seed": 1, "extra_rows": [], "more": 1}, {"input_seed": SEED_BOUND, "extra_rows": []}])
def test_malformed_records_name_their_source(bad):
    with pytest.raises(HiddenError, match="^attempt #4's record: "):
        Hidden.from_dict(bad, "attempt #4's record")


def test_mains_recording_serves_one_judgment_never_the_next_against_the_same_main():
    """The name of main's recording holds the judgment's hidden inputs: a judgment's own
    passes find it (same key), a second judgment against the same main (inputs drawn afresh)
    records main again, since a kept recording would hold inputs the next agent could read."""
    from gates.accuracy import recording_key

    spec, touched = {"model": "small", "rows": [1, 3, 17, 8]}, {"moe.situ"}
    one, two = Hidden(11, (5, 6)).to_dict(), Hidden(12, (5, 6)).to_dict()
    assert recording_key(spec, touched, False, one) == recording_key(dict(spec), {"moe.situ"}, False, dict(one))
    assert recording_key(spec, touched, False, one) != recording_key(spec, touched, False, two)  # seed
    assert recording_key(spec, touched, False, one) != \
        recording_key(spec, touched, False, Hidden(11, (5, 7)).to_dict())  # extra sizes
    assert recording_key(spec, touched, False, one) != recording_key(spec, {"kda.core"}, False, one)
    assert recording_key(spec, touched, False, one) != recording_key(spec, None, False, one)
    assert recording_key(spec, touched, False, one) != recording_key(spec, touched, True, one)
